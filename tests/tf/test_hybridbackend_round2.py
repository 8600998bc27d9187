"""HybridBackend parity, round 2, at 2 and 3 ranks
(tests/tf/rank_scripts/hybridbackend_round2.py): ``hb.train.monitored_session``
and ``hb.train.Server.monitored_session``, the session HybridBackend's own
tests and examples open, with training values checked against numpy;
``hb.data.make_one_shot_iterator`` in a script that never called init();
``hb.data.ParquetDataset.read_schema``; ``ds.apply(hb.data.to_sparse())``.
"""
import pytest

from train_util import case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hybridbackend_round2.py"
NPS = [2, 3]
TIMEOUT_S = 240


def run(np_):
    return launch(SCRIPT, np_, timeout=TIMEOUT_S)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
