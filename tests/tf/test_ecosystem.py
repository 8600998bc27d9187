"""Libraries people train recommenders with, under hbrun with the lines
docs/ecosystem.md adds, at 2 and 3 ranks: every rank ends with the same
weights, equal to one process trained on the whole batch (for in-batch
retrieval: on the mean of the ranks' shard losses).

- DeepCTR's DeepFM and DCN, tf_keras: tests/tf/rank_scripts/eco_deepctr.py
- keras-rs' FeatureCross and retrieval layers over
  hb.keras.layers.ShardedEmbedding, Keras 3: .../eco_keras_rs.py
- TensorFlow Recommenders' Ranking and Retrieval tasks, tf_keras:
  .../eco_tfrs.py

CI installs the libraries (the README's test command); a missing one
fails here (test_installed), it is never skipped. keras-rs needs Python
3.11 or later: on 3.10 its tests are skipped with that reason.
"""
import importlib.util
import sys

import pytest

from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# A launch: importing the library, then a few steps of every case and the
# one-process reference on rank 0 (a few seconds); the limit is for a
# loaded 2-core machine.
TIMEOUT_S = 180
RUNS_TF_KERAS = [(2, "tf_keras"), (3, "tf_keras")]
RUNS_KERAS3 = [(2, "keras3"), (3, "keras3")]
KERAS_RS_PYTHON = (3, 11)    # keras-rs 0.4's Requires-Python
KERAS_RS_SKIP = pytest.mark.skipif(
    sys.version_info < KERAS_RS_PYTHON,
    reason="keras-rs needs Python >= 3.11 (its Requires-Python)")

# module -> its pinned requirement (the README's test command installs it)
LIBRARIES = {
    "deepctr": "deepctr==0.9.4",
    "keras_rs": "keras-rs==0.4.0",
    "tensorflow_recommenders": "tensorflow-recommenders==0.7.7",
}


@pytest.mark.parametrize("module", [
    "deepctr", pytest.param("keras_rs", marks=KERAS_RS_SKIP),
    "tensorflow_recommenders"])
def test_installed(module):
    """The library is importable in this environment (CI installs it with
    the README's test command)."""
    assert importlib.util.find_spec(module) is not None, (
        "%s is not installed: pip install --no-deps %s (see the README's "
        "test command)" % (module, LIBRARIES[module]))


test_deepctr_launch_is_clean, test_deepctr_case, _ = rank_script_tests(
    "eco_deepctr.py", runs=RUNS_TF_KERAS, timeout=TIMEOUT_S)

test_keras_rs_launch_is_clean, test_keras_rs_case, _ = rank_script_tests(
    "eco_keras_rs.py", runs=RUNS_KERAS3, timeout=TIMEOUT_S)
test_keras_rs_launch_is_clean = KERAS_RS_SKIP(test_keras_rs_launch_is_clean)
test_keras_rs_case = KERAS_RS_SKIP(test_keras_rs_case)

test_tfrs_launch_is_clean, test_tfrs_case, _ = rank_script_tests(
    "eco_tfrs.py", runs=RUNS_TF_KERAS, timeout=TIMEOUT_S)
