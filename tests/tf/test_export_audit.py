"""Export audit: HybridBackend's export modes (mode='test' gives tag and
signature key 'eval'), local variables of the serving graph initialized at
load, and hb.saved_model.export_all (default modes, a returned main op,
errors), each SavedModel run by plain TensorFlow without hbcore; at 2 and
3 ranks with a sharded table (tests/tf/rank_scripts/export_audit.py).
"""
import pytest

from train_util import case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "export_audit.py"
NPS = [2, 3]
TIMEOUT_S = 300


def _run(np_):
    # Default stall limits: the other ranks wait in the next export while
    # rank 0 runs the plain TensorFlow process.
    return launch(SCRIPT, np_, timeout=TIMEOUT_S)


test_launch_is_clean, test_case = case_tests(SCRIPT, _run, NPS)
