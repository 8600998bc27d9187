"""Imports the hbcore under test for the launcher tests and the launcher
scripts (tests/launcher_scripts): this checkout when it is built in place,
else the installed package (see under_test.py).

``import hbcore`` never loads the native core (the package loads it on
first use of a name that needs it), so the launcher works even where the
core cannot load. A package that does not import at all is a real failure:
it is raised here, so the tests that need it fail instead of skipping.

A launcher script puts tests/ on sys.path itself before importing this
module; in pytest, tests/conftest.py does.
"""
import os
import sys
from types import ModuleType

from support.under_test import ROOT, checkout_is_built, import_paths

LAUNCHER_SCRIPTS = os.path.join(ROOT, "tests", "launcher_scripts")


def import_hbcore_package() -> None:
    """Imports hbcore (this checkout's when it is built)."""
    if checkout_is_built() and ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    import hbcore  # noqa: F401


def import_engine(name: str) -> ModuleType:
    """Imports Spark or Ray for a test module (skipped where the extra is
    not installed: CI installs both with ".[test]"), then the hbcore under
    test.

    Args:
        name: the engine's module, "pyspark" or "ray".

    Returns:
        The engine's module.
    """
    import pytest
    module = pytest.importorskip(name, reason="needs hbcore's extra for "
                                 + name)
    import_hbcore_package()
    return module


def rank_python_path() -> str:
    """PYTHONPATH for Spark's and Ray's workers: the hbcore under test and
    tests/launcher_scripts (the workers import hbcore and the functions of
    hosted_fns.py), then the caller's PYTHONPATH.

    Returns:
        The os.pathsep-joined entries.
    """
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(import_paths() + [LAUNCHER_SCRIPTS]
                           + ([old] if old else []))
