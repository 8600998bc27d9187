"""hbcore_tf.keras: callbacks (broadcast, metric averaging, learning-rate
warmup and schedules with momentum correction), load_model, the Keras-level
ops, and the timeline evidence that a model.fit step issues one fused
collective. Each runs with Keras 3 and with tf_keras (TF_USE_LEGACY_KERAS=1;
skipped with the reason when tf_keras is not importable).
"""
import pytest

from train_util import (TF_KERAS_SKIP, assert_one_collective_per_step,
                        case_names, flavor_case_params, launch,
                        tensorflow_missing, tf_keras_env, tf_keras_path,
                        timeline_run)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "train_keras.py"
LEGACY_ONLY = case_names(SCRIPT, "LEGACY_ONLY")
FLAVORS = [
    "keras3",
    pytest.param("tf_keras", marks=pytest.mark.skipif(
        tf_keras_path() is None, reason=TF_KERAS_SKIP)),
]


def keras_run(flavor):
    env = tf_keras_env() if flavor == "tf_keras" else {}
    return launch(SCRIPT, 2, env=env)


@pytest.mark.parametrize("flavor", FLAVORS)
def test_launch_is_clean(flavor):
    run = keras_run(flavor)
    run.assert_ok()
    want = "tf_keras" if flavor == "tf_keras" else "keras"
    assert run.results[0]["keras"] == want, run.results[0]


@pytest.mark.parametrize(
    "case,flavor",
    flavor_case_params(case_names(SCRIPT), LEGACY_ONLY, FLAVORS))
def test_case(case, flavor):
    keras_run(flavor).assert_cases([case])


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("phase", ["fit", "fit_bpps2"])
def test_fit_step_is_one_fused_collective(flavor, phase):
    """model.fit runs train_step in a tf.function; the optimizer's
    allreduce must still send all gradients of a step as one collective
    (with backward_passes_per_step=2: one per two steps)."""
    assert_one_collective_per_step(timeline_run(flavor == "tf_keras"), phase)
