"""DistributedOptimizer for Keras 3 and tf.compat.v1 optimizers, at 2 and 3
ranks: one hbrun launch per rank count runs every case of
tests/tf/rank_scripts/train_optimizers.py (each rank checks its variables
against numpy); each test below asserts one case on every rank.
"""
import pytest

from train_util import case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "train_optimizers.py"
NPS = [2, 3]


def run(np_):
    return launch(SCRIPT, np_)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
