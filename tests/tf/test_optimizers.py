"""DistributedOptimizer for Keras 3 and tf.compat.v1 optimizers, at 2 and 3
ranks: one hbrun launch per rank count runs every case of
tests/tf/rank_scripts/train_optimizers.py (each rank checks its variables
against numpy); each test below asserts one case on every rank.
"""
import pytest

from train_util import case_names, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "train_optimizers.py"
NPS = [2, 3]


@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_):
    """Every rank finishes, exits 0 and reports."""
    launch(SCRIPT, np_).assert_ok()


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, case):
    launch(SCRIPT, np_).assert_cases([case])
