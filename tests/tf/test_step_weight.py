"""Data-sync step weights in the gradient reduction at 2 and 3 ranks: a rank
without data (weight 0, NaN gradient) does not count in the average, in
DistributedOptimizer and DistributedGradientTape, eagerly, in a tf.function
and in a tf.compat.v1 graph; sparse gradients, groups, op=Sum, no weight,
no rank with data (tests/tf/rank_scripts/step_weight.py).
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "step_weight.py", timeout=240, env=STALL_FAST_ENV)
