"""Puts tests/ on sys.path, so test files import the test support as
``support.<module>`` (tests/support/), and makes in-process imports of
hbcore resolve like the ranks' (see support/under_test.py): ``python -m
pytest`` puts the checkout first on sys.path, which would shadow the
installed package with an unbuilt copy."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from support import hidden_imports, session_tmp  # noqa: E402
from support.under_test import ROOT, checkout_is_built  # noqa: E402

# The tests marked quiet run alone under xdist (support/quiet.py).
pytest_plugins = ["support.quiet"]

# Processes the tests start do without the packages Keras 3 imports only
# because they are installed (support/hidden_imports.py).
hidden_imports.apply()

# Processes the tests start leave their temporary files in one directory,
# removed at the end (support/session_tmp.py).
session_tmp.apply()


def pytest_sessionfinish(session, exitstatus):
    session_tmp.remove()

if not checkout_is_built():
    sys.path[:] = [p for p in sys.path
                   if os.path.abspath(p or os.curdir) != ROOT]
