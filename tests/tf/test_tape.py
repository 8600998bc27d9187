"""DistributedGradientTape and PartialDistributedGradientTape at 2 ranks
(tests/tf/rank_scripts/train_tape.py), and the timeline evidence that a
tape's gradients go out as one fused collective per step, eager and inside
tf.function (tests/tf/rank_scripts/train_timeline.py, shared with
test_keras.py).
"""
import pytest

from support.tf_launch import (REQUIRES_TF, assert_one_collective_per_step,
                               rank_script_tests, timeline_run)

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests("train_tape.py",
                                                       nps=(2,))


@pytest.mark.parametrize("phase", ["tape_eager", "tape_function",
                                   "apply_eager"])
def test_one_fused_collective_per_step(phase):
    """Each step's gradients reach the core together: one ALLREDUCE
    collective per step, carrying every gradient."""
    assert_one_collective_per_step(timeline_run(), phase)
