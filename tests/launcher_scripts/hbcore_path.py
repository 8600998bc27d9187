"""Imports the hbcore under test for the launcher tests: this checkout when
it is built in place, else the installed package (see tests/under_test.py).

``import hbcore`` never loads the native core (the package loads it on
first use of a name that needs it), so the launcher works even where the
core cannot load. A package that does not import at all is a real failure:
it is raised here, so the tests that need it fail instead of skipping.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from under_test import checkout_is_built  # noqa: E402


def import_hbcore_package() -> None:
    """Imports hbcore (this checkout's when it is built)."""
    if checkout_is_built() and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import hbcore  # noqa: F401
