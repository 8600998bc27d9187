"""Sharded embedding tables (hb.embedding_scope) at 1, 2 and 3 ranks: one
hbrun launch per rank count runs every case of
tests/tf/rank_scripts/sharded_embedding.py, where each rank compares its
rows of the table and the dense weights with plain single-process
TensorFlow trained on the whole batch (tf.compat.v1 graphs with SGD,
Adagrad, Adam and Ftrl, tf.function with a Keras optimizer, eager with
DistributedGradientTape, data sync's empty batches, lookup_sparse, an
out-of-range id)."""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF


def sharding_off_after(run):
    """The sharding option is off again after the scopes, on every rank."""
    assert all(r["sharding_off_after"] for r in run.results.values()), \
        run.results


test_launch_is_clean, test_case, _ = rank_script_tests(
    "sharded_embedding.py", nps=(1, 2, 3), timeout=300,
    check_launch=sharding_off_after)
