"""hb.metrics audit: weights whose shape TF's metrics squeeze or expand
([n, 1] against [n] and back), and hb.metrics.gauc (HybridBackend's group
AUC) against a numpy per-group rank-statistic AUC over every rank's
examples, also with one rank's batch empty; at 2 and 3 ranks
(tests/tf/rank_scripts/hb_metrics_audit.py).
"""
import pytest

from train_util import case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_metrics_audit.py"
NPS = [2, 3]
TIMEOUT_S = 240


def run(np_):
    return launch(SCRIPT, np_, timeout=TIMEOUT_S)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
