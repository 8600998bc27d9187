"""HybridBackend's list-column semantics of hb.data (DataFrame.Value,
fixed-length Fields, to_sparse / unbatch_and_to_sparse, rebatch, feedable
iterators, data sync, bad Fields) at 2 and 3 ranks: every case of
tests/tf/rank_scripts/hb_parquet_values.py in one launch per rank count.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_parquet_values.py", timeout=240)
