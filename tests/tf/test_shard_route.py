"""The sharded lookup's id bookkeeping kernels against a numpy model of
their contract, eagerly, in a tf.function and in a tf.compat.v1 graph,
with typed errors for malformed input (tests/tf/rank_scripts/
shard_route.py). The kernels are local to a rank, so one rank runs them;
their composition with the exchanges runs at 2 and 3 ranks in
test_sharded_embedding.py.
"""
import pytest

from train_util import case_names, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "shard_route.py"


def test_launch_is_clean():
    op_launch(SCRIPT, 1).assert_ok()


@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(case):
    op_launch(SCRIPT, 1).assert_cases([case])
