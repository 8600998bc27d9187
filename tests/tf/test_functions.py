"""Horovod 0.28.1 parity of hbcore_tf.functions at 2 and 3 ranks (Keras 3):
the root of broadcast_object keeps its own object
(tests/tf/rank_scripts/tf_functions_compression.py, whose one launch per
rank count also runs the cases of test_compression.py and
test_sync_batch_norm.py's jit_compile case).
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "tf_functions_compression.py"
TIMEOUT_S = 240

test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, env=STALL_FAST_ENV, timeout=TIMEOUT_S,
    cases=["broadcast_object_root_keeps_object"])
