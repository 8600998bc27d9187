"""hbcore_tf.embedding.sharding.local_initializer (in process): this rank's rows
of a sharded table from the initializer requested for the whole table."""
import numpy as np
import pytest

from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def _info(num_rows, num_shards, shard, dim):
    from hbcore_tf.embedding.partition import RowPartition
    from hbcore_tf._base.rank_local import ShardInfo

    return ShardInfo("t", RowPartition(num_rows, num_shards), shard, dim)


def test_v1_initializer_gets_the_partition():
    info = _info(7, 3, 1, 2)  # shard 1 holds rows 3..4

    def init(shape, dtype=None, partition_info=None):
        start = partition_info.var_offset[0]
        rows = np.arange(start, start + shape[0], dtype=np.float32)
        return np.repeat(rows[:, None], shape[1], axis=1)

    from hbcore_tf.embedding.sharding import local_initializer

    got = local_initializer(init, info)([info.rows, 2])
    np.testing.assert_array_equal(got, [[3, 3], [4, 4]])


def test_keras_initializer_runs_without_partition_info():
    import tensorflow as tf

    from hbcore_tf.embedding.sharding import local_initializer

    got = local_initializer(tf.keras.initializers.Constant(1.5),
                            _info(7, 3, 2, 2))([2, 2], dtype=tf.float32)
    np.testing.assert_array_equal(got, np.full((2, 2), 1.5, np.float32))


def test_an_initializers_own_type_error_is_raised_once():
    from hbcore_tf.embedding.sharding import local_initializer

    calls = []

    def init(shape, dtype=None, partition_info=None):
        calls.append(partition_info)
        raise TypeError("this initializer takes no dtype %r" % dtype)

    with pytest.raises(TypeError, match="takes no dtype 'int8'"):
        local_initializer(init, _info(7, 3, 0, 2))([3, 2], dtype="int8")
    assert len(calls) == 1 and calls[0] is not None


@pytest.mark.parametrize("initializer", ["zeros_initializer",
                                         "ones_initializer"])
def test_an_initializer_class_is_instantiated(initializer):
    """tf.compat.v1.get_variable accepts an initializer class (it
    instantiates it); the sharded table's initializer must too."""
    import tensorflow as tf

    from hbcore_tf.embedding.sharding import local_initializer

    cls = getattr(tf.compat.v1, initializer)
    info = _info(7, 3, 1, 2)
    got = local_initializer(cls, info)([info.rows, 2], dtype=tf.float32)
    value = 0.0 if initializer == "zeros_initializer" else 1.0
    np.testing.assert_array_equal(got, np.full((info.rows, 2), value,
                                               np.float32))


def _keras():
    from hbcore_tf._base import compat as _compat

    return _compat.keras_module()


@pytest.mark.parametrize("name,mode,limit", [
    ("GlorotUniform", "fan_avg", lambda rows, dim: np.sqrt(6.0 / (rows + dim))),
    ("HeUniform", "fan_in", lambda rows, dim: np.sqrt(6.0 / rows)),
    ("LecunUniform", "fan_in", lambda rows, dim: np.sqrt(3.0 / rows)),
])
def test_keras_fan_based_initializer_scales_for_the_whole_table(
        name, mode, limit):
    """A Keras VarianceScaling initializer takes no partition info: called
    for a block of 1000 of 4000 rows it must still draw from the whole
    table's range (its fans are the table's), not from a block-sized
    table's, twice as wide here."""
    import tensorflow as tf

    from hbcore_tf.embedding.sharding import local_initializer

    rows, dim = 4000, 8
    initializer = getattr(_keras().initializers, name)(seed=3)
    assert initializer.mode == mode
    info = _info(rows, 4, 2, dim)
    got = np.asarray(local_initializer(initializer, info)(
        [info.rows, dim], dtype=tf.float32))
    whole = limit(rows, dim)
    assert got.shape == (info.rows, dim)
    assert np.abs(got).max() <= whole * (1 + 1e-6), (np.abs(got).max(), whole)
    # 8000 uniform draws reach close to the bound.
    assert np.abs(got).max() > 0.95 * whole, (np.abs(got).max(), whole)
    # The caller's initializer is left as it was.
    assert initializer.scale in (1.0, 2.0)


def test_fan_out_and_non_fan_initializers_are_unchanged():
    """fan_out of a [rows, dim] table is dim on every rank, and a
    RandomUniform has no fans: both run as requested."""
    import tensorflow as tf

    from hbcore_tf.embedding.sharding import local_initializer

    keras = _keras()
    info = _info(4000, 4, 1, 8)
    fan_out = keras.initializers.VarianceScaling(
        3.0, mode="fan_out", distribution="uniform", seed=4)
    got = np.asarray(local_initializer(fan_out, info)([info.rows, 8],
                                                      dtype=tf.float32))
    expected = np.asarray(fan_out([info.rows, 8], dtype=tf.float32))
    np.testing.assert_allclose(got, expected)
    uniform = keras.initializers.RandomUniform(-0.5, 0.5, seed=5)
    got = np.asarray(local_initializer(uniform, info)([info.rows, 8],
                                                      dtype=tf.float32))
    np.testing.assert_allclose(
        got, np.asarray(uniform([info.rows, 8], dtype=tf.float32)))
