"""Which hbcore the tests exercise.

A developer's checkout with an in-place build (``python setup.py build_ext
--inplace``) tests the checkout; everywhere else (CI, a user running the
README's test command) the tests exercise the installed package, and the
checkout's unbuilt ``hbcore/`` must not shadow it.
"""
import glob
import os
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def checkout_is_built() -> bool:
    """Whether the checkout holds an in-place build of the native core."""
    return bool(glob.glob(os.path.join(ROOT, "hbcore", "_core*.so")))


def import_paths() -> List[str]:
    """Entries to put first on a rank's PYTHONPATH for hbcore."""
    return [ROOT] if checkout_is_built() else []
