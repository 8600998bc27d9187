"""Keras 3 with hbcore's DistributedOptimizer compiles without XLA (which
hbcore's collectives cannot run under), at 2 and 3 ranks
(tests/tf/rank_scripts/keras_xla.py)."""
import pytest

from train_util import case_names, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "keras_xla.py"


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_: int, case: str) -> None:
    op_launch(SCRIPT, np_).assert_cases([case])
