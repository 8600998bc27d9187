"""hb.saved_model export: HybridBackend's export modes (mode='test' gives
tag and signature key 'eval'), local variables of the serving graph
initialized at load, and hb.saved_model.export_all (default modes, a
returned main op, errors), each SavedModel run by plain TensorFlow without
hbcore; at 2 and 3 ranks with a sharded table
(tests/tf/rank_scripts/hb_export.py).
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# Default stall limits: the other ranks wait in the next export while
# rank 0 runs the plain TensorFlow process.
test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_export.py", timeout=300)
