"""Mixed precision in every way a user writes it, Keras 3, tf_keras and
tf.compat.v1, at 2 and 3 ranks, with one rank's local fp16 gradient
overflowing (tests/tf/rank_scripts/mixed_precision.py): no stall, every
rank skips the same step and keeps the same loss scale, and the weights
of the steps no rank skips equal one process on the whole batch. Also the
trace-time warning for a collective inside a tf.cond branch.
"""
from support.tf_launch import REQUIRES_TF, case_names, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "mixed_precision.py"
KERAS_CASES = case_names(SCRIPT, "KERAS_CASES")

# The v1 graphs do not depend on the Keras flavour: Keras 3's launch runs
# them.
test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, flavors=("keras3", "tf_keras"),
    cases={"keras3": KERAS_CASES + case_names(SCRIPT, "V1_CASES"),
           "tf_keras": KERAS_CASES + case_names(SCRIPT, "TF_KERAS_CASES")},
    timeout=300)
