"""Makes ``hbcore.launcher`` importable for the launcher tests, even while
``hbcore/__init__.py`` cannot import the native core (not built yet, or
being rebuilt).

The launcher itself never needs the core; these tests check the launcher,
so they should not fail for a reason that belongs to another layer.  When
the real package imports, it is used as is.
"""
import glob
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_hbcore_package() -> bool:
    """Imports hbcore from this checkout; returns False if a stub package
    had to stand in for hbcore/__init__.py."""
    built = glob.glob(os.path.join(ROOT, "hbcore", "_core*.so"))
    if built and ROOT not in sys.path:  # else: the installed package
        sys.path.insert(0, ROOT)
    try:
        import hbcore  # noqa: F401
        return True
    except ImportError:
        for name in [n for n in sys.modules if n == "hbcore" or n.startswith("hbcore.")]:
            del sys.modules[name]
        stub = types.ModuleType("hbcore")
        stub.__path__ = [os.path.join(ROOT, "hbcore")]
        sys.modules["hbcore"] = stub
        return False
