"""PartialDistributedGradientTape, hbcore_tf.keras.PartialDistributedOptimizer
and register_local_var at 2 and 3 ranks, with Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is not
importable): one hbrun launch per (rank count, Keras) runs every case of
tests/tf/rank_scripts/partial_distributed.py, where each rank compares the
shared and local weights with a plain-TensorFlow simulation of the job.
"""
import pytest

from train_util import (TF_KERAS_SKIP, case_names, launch,
                        tensorflow_missing, tf_keras_env, tf_keras_path)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "partial_distributed.py"
NPS = [2, 3]
FLAVORS = [
    "keras3",
    pytest.param("tf_keras", marks=pytest.mark.skipif(
        tf_keras_path() is None, reason=TF_KERAS_SKIP)),
]


def partial_run(np_, flavor):
    env = tf_keras_env() if flavor == "tf_keras" else {}
    return launch(SCRIPT, np_, env=env, timeout=300)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    """Every rank finishes, exits 0 and reports, with the intended Keras."""
    run = partial_run(np_, flavor)
    run.assert_ok()
    want = "tf_keras" if flavor == "tf_keras" else "keras"
    assert run.results[0]["keras"] == want, run.results[0]


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, flavor, case):
    partial_run(np_, flavor).assert_cases([case])
