"""HybridBackend's initializer convention for feature-column tables.

HybridBackend's DenseFeatures calls an embedding column's initializer on
each rank for that rank's rows only: with the local shape (rank r of W
holds ``num_rows // W`` rows, plus one when ``r < num_rows % W``), dtype,
and ``partition_info=None``; and the rows it returns are the table's ids
``r, r + W, r + 2W, ...`` (its round-robin layout: id ``i`` lives on rank
``i % W``). Scripts that initialize a table from a function rely on that
(HybridBackend's own tests return a different block from each rank).

hbcore's tables hold contiguous blocks of ids (RowPartition), so that a
checkpoint is the table in id order as one slice per rank. Inside
``feature_column_tables()`` (set by hb.dense_features and
hb.keras.layers.DenseFeatures around their columns), the sharding getter
(hbcore_tf.embedding.sharding) builds the initial value of a table whose
initializer is a plain function (not a TensorFlow or Keras initializer
object) this way:

1. call the function as HybridBackend does (this rank's round-robin rows;
   with a partitioner in the variable scope, once per partition of this
   rank's rows, with TF's partition info of that partition within them,
   as HybridBackend partitions each rank's shard);
2. move the rows to their block owners with one alltoall whose splits and
   restoring permutation are fixed by (num_rows, world size) alone, so the
   collective is built identically on every rank and its sizes are
   values. It runs when the initializer runs (every rank runs its
   variables' initializers, as tf.compat.v1.global_variables_initializer
   and MonitoredTrainingSession do; a session that restores a checkpoint
   runs none).

Initializer objects keep hbcore's own convention (a constant holding the
whole table is sliced; others are called for this rank's block with its
partition info): their rows do not depend on which rank draws them, so
no exchange is needed. At world size 1 nothing moves.
"""
import contextlib
import inspect
import threading
from typing import Any, Callable, Iterator, List, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf._base.rank_local import ShardInfo
from hbcore_tf._patches import internals
from hbcore_tf.mpi_ops import alltoall_int64_splits

_state = threading.local()  # .depth: nesting of feature_column_tables


@contextlib.contextmanager
def feature_column_tables() -> Iterator[None]:
    """Tables the sharding getter makes inside are feature-column tables:
    HybridBackend's initializer convention applies (module docstring)
    and a partitioner in the variable scope shapes the initializer's
    calls instead of the table."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def active() -> bool:
    """Whether a ``feature_column_tables()`` scope is open on this thread."""
    return getattr(_state, "depth", 0) > 0


def is_plain_function(initializer: Any) -> bool:
    """Whether ``initializer`` is a user's function (HybridBackend's
    convention applies) rather than a TensorFlow or Keras initializer
    object or class (hbcore's convention)."""
    if initializer is None or inspect.isclass(initializer):
        return False
    if inspect.isfunction(initializer) or inspect.ismethod(initializer):
        return True
    module = type(initializer).__module__ or ""
    # functools.partial and other callables of the user's count as
    # functions; initializer objects come from TF or Keras modules.
    return not module.startswith(("tensorflow", "keras", "tf_keras"))


def round_robin_rows(num_rows: int, world: int, rank: int) -> np.ndarray:
    """The ids HybridBackend's layout gives ``rank``: ``rank, rank +
    world, ...`` below ``num_rows``."""
    return np.arange(rank, num_rows, world, dtype=np.int64)


def exchange_plan(info: ShardInfo) -> Any:
    """The alltoall that turns round-robin rows into blocks, for this rank.

    Args:
        info: the table's ShardInfo on this rank.

    Returns:
        ``(send_splits, restore)``: how many of this rank's round-robin
        rows (in order) go to each block owner, and the permutation that
        puts the received rows (grouped by sender, each sender's in id
        order) into this rank's block order.
    """
    part = info.partition
    world = part.num_shards
    mine = round_robin_rows(part.num_rows, world, info.shard)
    ends = np.array([part.offset(s) + part.rows(s) for s in range(world)])
    owners = np.searchsorted(ends, mine, side="right")
    send_splits = np.bincount(owners, minlength=world).astype(np.int64)
    block = np.arange(info.offset, info.offset + info.rows, dtype=np.int64)
    received_order = np.lexsort((block, block % world))
    return send_splits, np.argsort(received_order).astype(np.int64)


def _partition_offsets(partitioner: Any, shape: List[int],
                       dtype: tf.DType) -> List[int]:
    """Row offsets of the partitions ``partitioner`` makes of ``shape``
    (first axis only, as TF partitions embedding tables), plus the end."""
    counts = partitioner(shape=tf.TensorShape(shape), dtype=dtype)
    if any(int(c) != 1 for c in list(counts)[1:]):
        raise ValueError("feature-column table: a partitioner may split "
                         "only the rows of a table, got %s" % (counts,))
    parts = max(1, min(int(counts[0]), shape[0]))
    size, extra = divmod(shape[0], parts)
    offsets = [0]
    for p in range(parts):
        offsets.append(offsets[-1] + size + (1 if p < extra else 0))
    return offsets


def _call_as_hybridbackend(initializer: Callable, shape: List[int],
                           dtype: tf.DType, partitioner: Any) -> tf.Tensor:
    """This rank's round-robin rows from ``initializer``, called as
    HybridBackend calls it (once, or once per partition)."""
    _PartitionInfo = internals.PARTITION_INFO.load()  # noqa: N806

    if partitioner is None or shape[0] == 0:
        return tf.convert_to_tensor(
            initializer(shape, dtype=dtype, partition_info=None), dtype)
    offsets = _partition_offsets(partitioner, shape, dtype)
    parts = []
    for begin, end in zip(offsets[:-1], offsets[1:]):
        info = _PartitionInfo(full_shape=shape, var_offset=[begin, 0])
        parts.append(tf.convert_to_tensor(initializer(
            [end - begin, shape[1]], dtype=dtype, partition_info=info),
            dtype))
    return tf.concat(parts, 0)


def column_initializer(initializer: Callable, info: ShardInfo,
                       partitioner: Optional[Any]) -> Callable:
    """The initializer of this rank's block of a feature-column table
    whose initializer is a plain function (module docstring).

    Args:
        initializer: the column's function ``(shape, dtype,
            partition_info)``.
        info: the table's ShardInfo on this rank.
        partitioner: the variable scope's partitioner, or None.

    Returns:
        A callable ``init(shape, dtype=None, partition_info=None)`` for
        tf.compat.v1.get_variable, giving this rank's block in id order.
    """
    world = info.partition.num_shards
    local = [info.rows, info.dim]

    def init(shape, dtype=None, partition_info=None, **_):
        dtype = tf.as_dtype(dtype or tf.float32)
        rows = _call_as_hybridbackend(initializer, local, dtype, partitioner)
        rows = tf.ensure_shape(tf.reshape(rows, local), local)
        if world == 1:
            return rows
        send_splits, restore = exchange_plan(info)
        received, _ = alltoall_int64_splits(
            rows, tf.constant(send_splits),
            "hb_round_robin_init." + info.name.replace("/", "."), True)
        return tf.gather(received, tf.constant(restore))
    return init
