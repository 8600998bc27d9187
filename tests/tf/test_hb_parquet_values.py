"""HybridBackend's list-column semantics of hb.data (DataFrame.Value,
fixed-length Fields, to_sparse / unbatch_and_to_sparse, rebatch, feedable
iterators, data sync, bad Fields) at 2 and 3 ranks: every case of
tests/tf/rank_scripts/hb_parquet_values.py in one launch per rank count.
"""
import pytest

from train_util import case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_parquet_values.py"

test_launch_is_clean, test_case = case_tests(
    SCRIPT, lambda np_: launch(SCRIPT, np_, timeout=240))
