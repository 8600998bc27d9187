"""hbcore_tf.smddp, the smdistributed.dataparallel.tensorflow API, at 2 and
3 ranks (tests/tf/rank_scripts/smddp.py); smddp's TF2 example runs as
examples/smddp_tf2_mnist.py in test_train_examples.py.
"""
import pytest

from train_util import case_tests, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "smddp.py"
NPS = [2, 3]


def run(np_):
    return op_launch(SCRIPT, np_)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
