"""Keras 3 with hbcore's DistributedOptimizer compiles without XLA (which
hbcore's collectives cannot run under), at 2 and 3 ranks
(tests/tf/rank_scripts/keras_xla.py)."""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "keras_xla.py", timeout=240, env=STALL_FAST_ENV)
