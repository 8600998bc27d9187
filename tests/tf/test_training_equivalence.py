"""Training with N ranks on N shards matches one process on the whole batch
(same initial weights, SGD; Adam too) to float tolerance, for every path:
Keras model.fit, a custom loop with DistributedOptimizer,
DistributedGradientTape eager and in tf.function, tf.compat.v1 graphs, and
local aggregation (backward_passes_per_step=2). Keras 3 at 2 and 3 ranks;
tf_keras (current and legacy optimizers) at 2 ranks.
"""
import pytest

from train_util import (TF_KERAS_SKIP, case_names, flavor_case_params,
                        launch, tensorflow_missing, tf_keras_env,
                        tf_keras_path)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "train_equivalence.py"
LEGACY_ONLY = case_names(SCRIPT, "LEGACY_ONLY")
RUNS = [
    pytest.param("keras3", 2, id="keras3-np2"),
    pytest.param("keras3", 3, id="keras3-np3"),
    pytest.param("tf_keras", 2, id="tf_keras-np2", marks=pytest.mark.skipif(
        tf_keras_path() is None, reason=TF_KERAS_SKIP)),
]


def equivalence_run(flavor, np_):
    env = tf_keras_env() if flavor == "tf_keras" else {}
    return launch(SCRIPT, np_, env=env, timeout=240)


@pytest.mark.parametrize("flavor,np_", RUNS)
def test_launch_is_clean(flavor, np_):
    equivalence_run(flavor, np_).assert_ok()


@pytest.mark.parametrize(
    "case,flavor,np_",
    flavor_case_params(case_names(SCRIPT), LEGACY_ONLY, RUNS))
def test_matches_single_process(case, flavor, np_):
    equivalence_run(flavor, np_).assert_cases([case])
