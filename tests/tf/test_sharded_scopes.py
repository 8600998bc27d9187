"""Sharded tables and the scopes and optimizers around them, at 2 and 3
ranks (tests/tf/rank_scripts/sharded_scopes.py, one hbrun launch per rank
count, each rank checking against plain single-process TF/Keras): nested
sharding scopes shard a table once; a tf.compat.v1 optimizer built inside
hb.scope(sharding=True) keeps its slots as the table's blocks; a Keras
optimizer with slots on a get_variable table, inside hb.scope, trains like
plain Keras and checkpoints its slots whole; a tf.compat.v1 optimizer
stepping a sharded table eagerly names the table in its error;
export_plain_model keeps a ShardedEmbedding that was left replicated
whole."""
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "sharded_scopes.py", timeout=300, env=STALL_FAST_ENV)
