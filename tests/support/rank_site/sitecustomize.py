"""Start-up of every Python process the tests start (this directory is on
their PYTHONPATH, see tests/support/hidden_imports.py): the modules named
in HB_TEST_HIDDEN_MODULES (comma-separated top-level names) cannot be
imported: an import of one raises ModuleNotFoundError and
importlib.util.find_spec returns None for it, as if it were not installed.

Why: ``import keras`` (Keras 3) imports scikit-learn and matplotlib when
they are installed, for its scikit-learn wrappers and plotting helpers,
and falls back quietly when they are not. The test extra installs both for
hbcore's autotune; no rank script needs them, and they cost every process
that imports Keras about 2 s of CPU on a 2-core machine (3.5 s instead of
5.5 s for ``import tensorflow, keras, hbcore_tf``): the test files that
start the most TensorFlow processes (the examples, the tf.data service
reads, the ecosystem libraries) ran 17% faster without them. A test that
needs one (autotune's optimiser) sets the variable empty for its launch.
"""
import os
import sys

_HIDDEN = frozenset(name for name in os.environ.get(
    "HB_TEST_HIDDEN_MODULES", "").split(",") if name)


class _PathFinderWithout:
    """sys.meta_path's PathFinder, blind to the hidden top-level packages:
    for them it finds nothing, so ``import`` raises ModuleNotFoundError and
    ``importlib.util.find_spec`` returns None, exactly as when they are not
    installed (pyspark, for one, probes with find_spec)."""

    def __init__(self, finder):
        self._finder = finder

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102
        if fullname.partition(".")[0] in _HIDDEN:
            return None
        return self._finder.find_spec(fullname, path, target)

    def __getattr__(self, name):  # invalidate_caches, find_distributions
        return getattr(self._finder, name)


if _HIDDEN:
    sys.meta_path[:] = [
        _PathFinderWithout(finder)
        if getattr(finder, "__name__", "") == "PathFinder" else finder
        for finder in sys.meta_path]
