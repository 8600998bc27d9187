"""hbcore_tf.smddp, the smdistributed.dataparallel.tensorflow API, at 2 and
3 ranks (tests/tf/rank_scripts/smddp.py); smddp's TF2 example runs as
examples/smddp_tf2_mnist.py in test_train_examples.py.
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "smddp.py", timeout=240, env=STALL_FAST_ENV)
