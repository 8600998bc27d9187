"""hb.scope, @hb.function, hb.wraps and hb.train (HybridBackend API) at 2
and 3 ranks, with Keras 3 and tf_keras (TF_USE_LEGACY_KERAS=1; skipped
with the reason when tf_keras is not importable): one hbrun launch per
(rank count, Keras) runs every case of tests/tf/rank_scripts/hb_scope.py,
where each rank compares its weights with plain single-process TensorFlow
trained on the whole batch from rank 0's initial values (the ranks start
from different ones). The tf.compat.v1 cases do not depend on Keras and
run in the Keras 3 launch only.
"""
from support.tf_launch import REQUIRES_TF, case_names, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "hb_scope.py"
KERAS_CASES = case_names(SCRIPT, "KERAS_CASES")

# Keras 3 runs the tf.compat.v1 and the Keras cases, tf_keras the Keras ones.
test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, flavors=("keras3", "tf_keras"), timeout=300,
    cases={"keras3": case_names(SCRIPT, "V1_CASES") + KERAS_CASES,
           "tf_keras": KERAS_CASES})
