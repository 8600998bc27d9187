"""tf.compat.v1.train.MonitoredTrainingSession inside hb.scope /
@hb.function is hbcore's distributed one (HybridBackend's scope rewrites
it), at 2 and 3 ranks; TF's is restored when the last scope closes. One
hbrun launch per rank count runs every case of
tests/tf/rank_scripts/hb_scope_mts.py.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_scope_mts.py", timeout=300)
