"""hbcore_tf.embedding.scope.local_initializer (in process): this rank's rows
of a sharded table from the initializer requested for the whole table."""
import numpy as np
import pytest

from train_util import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def _info(num_rows, num_shards, shard, dim):
    from hbcore_tf.embedding.partition import RowPartition
    from hbcore_tf.embedding.table import ShardInfo

    return ShardInfo("t", RowPartition(num_rows, num_shards), shard, dim)


def test_v1_initializer_gets_the_partition():
    info = _info(7, 3, 1, 2)  # shard 1 holds rows 3..4

    def init(shape, dtype=None, partition_info=None):
        start = partition_info.var_offset[0]
        rows = np.arange(start, start + shape[0], dtype=np.float32)
        return np.repeat(rows[:, None], shape[1], axis=1)

    from hbcore_tf.embedding.scope import local_initializer

    got = local_initializer(init, info)([info.rows, 2])
    np.testing.assert_array_equal(got, [[3, 3], [4, 4]])


def test_keras_initializer_runs_without_partition_info():
    import tensorflow as tf

    from hbcore_tf.embedding.scope import local_initializer

    got = local_initializer(tf.keras.initializers.Constant(1.5),
                            _info(7, 3, 2, 2))([2, 2], dtype=tf.float32)
    np.testing.assert_array_equal(got, np.full((2, 2), 1.5, np.float32))


def test_an_initializers_own_type_error_is_raised_once():
    from hbcore_tf.embedding.scope import local_initializer

    calls = []

    def init(shape, dtype=None, partition_info=None):
        calls.append(partition_info)
        raise TypeError("this initializer takes no dtype %r" % dtype)

    with pytest.raises(TypeError, match="takes no dtype 'int8'"):
        local_initializer(init, _info(7, 3, 0, 2))([3, 2], dtype="int8")
    assert len(calls) == 1 and calls[0] is not None
