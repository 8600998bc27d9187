"""hbcore_tf.keras: callbacks (broadcast, metric averaging, learning-rate
warmup and schedules with momentum correction), load_model, the Keras-level
ops, and the timeline evidence that a model.fit step issues one fused
collective. Each runs with Keras 3 and with tf_keras (TF_USE_LEGACY_KERAS=1;
skipped with the reason when tf_keras is not importable).
"""
import pytest

from support.tf_launch import (REQUIRES_TF, assert_one_collective_per_step,
                               case_names, keras_flavors, rank_script_tests,
                               timeline_run)

pytestmark = REQUIRES_TF

SCRIPT = "train_keras.py"
CASES = case_names(SCRIPT)
LEGACY_ONLY = case_names(SCRIPT, "LEGACY_ONLY")

# At 2 ranks; the LEGACY_ONLY cases (tf_keras.optimizers.legacy) exist
# only under tf_keras.
test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, nps=(2,), flavors=("keras3", "tf_keras"), cases={
        "keras3": [c for c in CASES if c not in LEGACY_ONLY],
        "tf_keras": CASES})


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("phase", ["fit", "fit_bpps2"])
def test_fit_step_is_one_fused_collective(flavor, phase):
    """model.fit runs train_step in a tf.function; the optimizer's
    allreduce must still send all gradients of a step as one collective
    (with backward_passes_per_step=2: one per two steps)."""
    assert_one_collective_per_step(timeline_run(flavor == "tf_keras"), phase)
