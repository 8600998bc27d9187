"""Data-sync step weights in the gradient reduction at 2 and 3 ranks: a rank
without data (weight 0, NaN gradient) does not count in the average, in
DistributedOptimizer and DistributedGradientTape, eagerly, in a tf.function
and in a tf.compat.v1 graph; sparse gradients, groups, op=Sum, no weight,
no rank with data (tests/tf/rank_scripts/step_weight.py).
"""
import pytest

from train_util import case_tests, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "step_weight.py"
NPS = [2, 3]


def run(np_):
    return op_launch(SCRIPT, np_)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
