"""The sharded lookup's id bookkeeping kernels against a numpy model of
their contract, eagerly, in a tf.function and in a tf.compat.v1 graph,
with typed errors for malformed input (tests/tf/rank_scripts/
shard_route.py), at 1 and 3 ranks (each rank runs the same local checks;
their composition with the exchanges runs at 2 and 3 ranks in
test_sharded_embedding.py).
"""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "shard_route.py", nps=(1, 3), timeout=240, env=STALL_FAST_ENV)
