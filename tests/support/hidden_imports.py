"""Optional packages the tests' processes do without: what they are, and
how a launch keeps them.

conftest.py calls :func:`apply` once per session: every process the tests
start then has rank_site/ (its sitecustomize.py) first on PYTHONPATH and
HB_TEST_HIDDEN_MODULES naming :data:`HIDDEN`, so those packages are not
importable there (see rank_site/sitecustomize.py for why). The pytest
process itself is unaffected (it started before). A launch that needs one
passes :data:`KEEP` in its environment.
"""
import os
from typing import Dict

RANK_SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "rank_site")
VARIABLE = "HB_TEST_HIDDEN_MODULES"
# What `import keras` pulls in only because it is installed: scikit-learn
# (with scipy) for keras.wrappers, matplotlib for keras.visualization.
HIDDEN = "sklearn,matplotlib"
# The environment entry of a launch that imports them (HB_AUTOTUNE's
# optimiser on rank 0 needs scikit-learn).
KEEP: Dict[str, str] = {VARIABLE: ""}


def apply() -> None:
    """Puts rank_site/ first on PYTHONPATH and sets HB_TEST_HIDDEN_MODULES
    in this process's environment, for every process it starts."""
    paths = [RANK_SITE] + [p for p in os.environ.get(
        "PYTHONPATH", "").split(os.pathsep) if p and p != RANK_SITE]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ.setdefault(VARIABLE, HIDDEN)
