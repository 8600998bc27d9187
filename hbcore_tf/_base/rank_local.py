"""The rank-local variable notion: a variable whose value is held by this
rank only (a sharded embedding table's block of rows, or an optimizer slot
of one), as opposed to the replicated variables of data parallelism.

The layers below the features need this notion without the embedding
feature: broadcasts (hbcore_tf.functions, the Keras callbacks) skip
rank-local variables, because rank 0's rows are not the other ranks'; the
gradient reduction passes their gradients through (the sharded lookup
already combined them); savers collect them collectively. The embedding
feature (hbcore_tf.embedding.table) makes the tables and tags them here.

A variable is tagged with a ``ShardInfo`` (an attribute on the variable,
and on the tf.Variable inside a Keras 3 variable). tf.compat.v1 optimizer
slots are not tagged: they are recognised by their checkpoint slice name,
``<table>/<slot>``, against the table names recorded by ``note_table``.
"""
from typing import Any, NamedTuple, Optional, Protocol

import numpy as np
import tensorflow as tf

from hbcore_tf.mpi_ops import allgather
from hbcore_tf._base.compat import unwrap_variable


class RowBlocks(Protocol):
    """Which rank holds which rows of a table
    (hbcore_tf.embedding.partition.RowPartition is the implementation)."""

    num_rows: int

    @property
    def hashed(self) -> bool:
        """Whether ids are keys owned by their hash (a dynamic table)."""

    def rows(self, shard: int) -> int:
        """Rows held by ``shard``."""

    def offset(self, shard: int) -> int:
        """Global id of the first row of ``shard``."""


_SHARD_ATTR = "_hb_shard_info"
# Checkpoint names of the sharded tables made in this process (their slots'
# slice infos are named "<table>/<slot>", see is_rank_local).
_table_names: set = set()
# Whether any variable was tagged as a shard in this process (tables of
# every kind, and Keras slots): savers skip their checks while it is not.
_any_tagged = False


def any_sharded_tables() -> bool:
    """Whether this process has made a sharded table (v1 or Keras)."""
    return _any_tagged


class ShardInfo(NamedTuple):
    """How one rank holds one sharded table.

    Attributes:
        name: the table's name (the variable's name without ``:0``).
        partition: the row blocks (a RowPartition).
        shard: this rank's block.
        dim: the embedding dimension.
    """

    name: str
    partition: RowBlocks
    shard: int
    dim: int

    @property
    def num_rows(self) -> int:
        """Rows of the whole table."""
        return self.partition.num_rows

    @property
    def rows(self) -> int:
        """Rows this rank holds (its block)."""
        return self.partition.rows(self.shard)

    @property
    def offset(self) -> int:
        """Global id of this rank's first row."""
        return self.partition.offset(self.shard)


def shard_info(variable: Any) -> Optional[ShardInfo]:
    """The ShardInfo of a sharded table (a tf.Variable, or a Keras variable
    wrapping one), else None.

    Args:
        variable: a tf.Variable, a Keras variable wrapping one, or any
            other object.

    Returns:
        The ShardInfo that ``tag`` attached to ``variable`` (or to the
        tf.Variable inside it), or None when it is not a sharded table's
        shard.
    """
    info = getattr(variable, _SHARD_ATTR, None)
    if info is None:
        inner = getattr(variable, "value", None)
        if isinstance(inner, tf.Variable):
            info = getattr(inner, _SHARD_ATTR, None)
    return info


def whole_value(variable: Any) -> np.ndarray:
    """The whole value of ``variable`` in id order: for a sharded table or
    slot the rows of every rank, allgathered (collective: every rank calls
    it, in the same order, and each gets the whole table); else its value.

    Args:
        variable: a tf.Variable, or a Keras variable wrapping one.

    Returns:
        A numpy array.

    Raises:
        NotImplementedError: a dynamic table's store or slot (its rows
            have no id order; the message names the table and the
            formats that save it).
    """
    info = shard_info(variable)
    if info is not None and info.partition.hashed:
        raise NotImplementedError(
            "dynamic embedding table %r: this format stores variables by "
            "value, which a dynamic table has not (its rows follow keys); "
            "save it with tf.train.Checkpoint, tf_keras' TensorFlow-format "
            "save_weights, or Keras' .weights.h5 / .keras files" % info.name)
    local = tf.convert_to_tensor(unwrap_variable(variable))
    if info is None or info.rows == info.num_rows:
        return local.numpy()
    # One name per variable (a table and each of its slots), the same on
    # every rank.
    key = getattr(variable, "path", None) or variable.name
    return allgather(local, name="hbcore.whole_value." +
                     key.replace(":", "_")).numpy()


def local_value(variable: Any, value: Any) -> Any:
    """``value`` for ``variable``: this rank's rows of it when ``variable``
    is a fixed sharded table or slot and ``value`` is the whole table
    (``[num_rows, ...]``), else ``value`` unchanged.

    Args:
        variable: a tf.Variable, or a Keras variable wrapping one.
        value: an array read from a file.

    Returns:
        The rows of ``value`` this rank holds, or ``value``.
    """
    info = shard_info(variable)
    shape = tuple(getattr(value, "shape", ()))
    if (info is None or info.rows == info.num_rows or not shape
            or shape[0] != info.num_rows
            or tuple(variable.shape)[:1] != (info.rows,)):
        return value
    return np.asarray(value[info.offset:info.offset + info.rows])


def is_sharded(variable: Any) -> bool:
    """Whether ``variable`` is (a wrapper of) a sharded table's shard.

    Args:
        variable: a tf.Variable, a Keras variable wrapping one, or any
            other object.

    Returns:
        True when ``variable`` carries a ShardInfo (see ``shard_info``).
    """
    return shard_info(variable) is not None


def is_rank_local(variable: Any) -> bool:
    """Whether ``variable`` holds values that are this rank's own: a sharded
    table's shard, or an optimizer slot of one (tf.compat.v1 slots inherit
    the table's checkpoint slice as ``<table>/<slot>``; Keras slots are
    tagged when the optimizer builds them). Broadcasts skip such variables:
    rank 0's rows are not the other ranks' rows.

    Args:
        variable: a tf.Variable, or a Keras variable wrapping one.

    Returns:
        True for a sharded table's shard or an optimizer slot of one,
        else False.
    """
    if is_sharded(variable):
        return True
    inner = getattr(variable, "value", None)
    for v in (variable, inner if isinstance(inner, tf.Variable) else None):
        info = getattr(v, "_save_slice_info", None)
        if info is not None and info.full_name.rsplit("/", 1)[0] in \
                _table_names and info.full_name not in _table_names:
            return True
    return False


def tag(variable: Any, info: ShardInfo) -> None:
    """Marks ``variable`` (and the tf.Variable inside a Keras 3 variable)
    as the local shard described by ``info``.

    From then on ``any_sharded_tables()`` is true in this process.

    Args:
        variable: a tf.Variable, or a Keras variable wrapping one.
        info: the table and this rank's block of its rows.
    """
    global _any_tagged
    _any_tagged = True
    object.__setattr__(variable, _SHARD_ATTR, info)
    inner = getattr(variable, "value", None)
    if isinstance(inner, tf.Variable) and inner is not variable:
        object.__setattr__(inner, _SHARD_ATTR, info)


def note_table(name: str) -> None:
    """Records the checkpoint name of a sharded table made in this process,
    so that ``is_rank_local`` recognises the tf.compat.v1 optimizer slots of
    the table (their slice names are ``<name>/<slot>``).

    Args:
        name: the table's checkpoint name (``ShardInfo.name``).
    """
    _table_names.add(name)
