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
import pytest

from train_util import STALL_FAST_ENV, case_tests, launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "sharded_scopes.py"
NPS = [2, 3]


def run(np_):
    return launch(SCRIPT, np_, timeout=300, env=STALL_FAST_ENV)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
