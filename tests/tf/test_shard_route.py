"""The sharded lookup's id bookkeeping kernels against a numpy model of
their contract, eagerly, in a tf.function and in a tf.compat.v1 graph,
with typed errors for malformed input (tests/tf/rank_scripts/
shard_route.py), at 1 and 3 ranks (each rank runs the same local checks;
their composition with the exchanges runs at 2 and 3 ranks in
test_sharded_embedding.py).
"""
import pytest

from train_util import case_tests, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "shard_route.py"
NPS = [1, 3]


def run(np_):
    return op_launch(SCRIPT, np_)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
