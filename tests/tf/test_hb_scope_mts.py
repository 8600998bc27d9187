"""tf.compat.v1.train.MonitoredTrainingSession inside hb.scope /
@hb.function is hbcore's distributed one (HybridBackend's scope rewrites
it), at 2 and 3 ranks; TF's is restored when the last scope closes. One
hbrun launch per rank count runs every case of
tests/tf/rank_scripts/hb_scope_mts.py.
"""
import pytest

from train_util import case_names, case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_scope_mts.py"
CASES = case_names(SCRIPT)


def run(np_):
    return launch(SCRIPT, np_, timeout=300)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, [2, 3])
