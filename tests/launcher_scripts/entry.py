"""Runs a launcher entry point for the tests: ``entry.py hbrun ARGS...`` is
``hbrun ARGS...``, ``entry.py run ARGS...`` is ``python -m hbcore.run ARGS...``
(the launcher never loads the native core; see
tests/support/hbcore_path.py).
"""
import importlib
import os
import sys

# tests/, for the test support
sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from support.hbcore_path import import_hbcore_package  # noqa: E402

import_hbcore_package()
if sys.argv[1] == "hbrun":
    from hbcore.launcher.cli import main
else:
    main = importlib.import_module("hbcore.run").main
sys.exit(main(sys.argv[2:]))
