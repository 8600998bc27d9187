"""DistributedGradientTape and PartialDistributedGradientTape at 2 ranks
(tests/tf/rank_scripts/train_tape.py), and the timeline evidence that a
tape's gradients go out as one fused collective per step, eager and inside
tf.function (tests/tf/rank_scripts/train_timeline.py, shared with
test_keras.py).
"""
import pytest

from train_util import (assert_one_collective_per_step, case_names, launch,
                        tensorflow_missing, timeline_run)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "train_tape.py"


def test_launch_is_clean():
    launch(SCRIPT, 2).assert_ok()


@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(case):
    launch(SCRIPT, 2).assert_cases([case])


@pytest.mark.parametrize("phase", ["tape_eager", "tape_function",
                                   "apply_eager"])
def test_one_fused_collective_per_step(phase):
    """Each step's gradients reach the core together: one ALLREDUCE
    collective per step, carrying every gradient."""
    assert_one_collective_per_step(timeline_run(), phase)
