"""The sharding of ``hb.embedding_scope()`` and ``hb.scope(sharding=True)``
(both in hbcore_tf.scope): tables made by ``tf.compat.v1.get_variable``
inside are sharded across ranks.

    with hb.scope():
        with hb.embedding_scope():
            emb = tf.compat.v1.get_variable("emb", shape=[bucket_size, dim])
        e = tf.nn.embedding_lookup(emb, ids)

The scope re-enters the current variable scope with a custom getter (TF's
own extension point, composed with any custom getter already there). For
each variable requested while the ``sharding`` option is on, the getter:

1. decides: a 2-D table with at least ``max(size(), emb_min_rows_to_shard)``
   rows is sharded; anything else is created unchanged (replicated, data
   parallel like any variable);
2. creates this rank's rows only (RowPartition), as a resource variable,
   under the table's own name, with the initializer called for the local
   shape and TF's partition info (full shape and offset) as for a
   partitioned variable; a constant initializer holding the whole table,
   or an initial value tensor, is sliced to this rank's rows, so sharded
   training starts from the same table as single-process training;
3. turns it into the sharded table (hbcore_tf.embedding.table).

Tables of feature columns (hb.dense_features, hb.keras.layers.
DenseFeatures) follow HybridBackend's convention where it differs: an
initializer that is a plain function is called for this rank's
round-robin rows and they are moved to their blocks, and a partitioner
in the variable scope is accepted (hbcore_tf.embedding.column_init).

A request made while a shard is being created (a table's block passed on
by an enclosing sharding scope's getter, or an optimizer slot of a
sharded table, see ``install_table_patches``) is this rank's rows already and
is passed through unchanged.

Put only embedding tables inside: any 2-D variable large enough is sharded,
and a dense kernel read with matmul would see one rank's rows.
"""
import contextlib
import copy
import functools
import inspect
import numbers
import threading
from typing import Any, Callable, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf._base.options import options
from hbcore_tf._base.rank_local import ShardInfo, is_sharded, shard_info, tag
from hbcore_tf._patches import internals, keras_slots, slot_creator
from hbcore_tf.embedding import (checkpoint_savers, column_init,
                                 dynamic_checkpoint)
from hbcore_tf.embedding.partition import RowPartition
from hbcore_tf.embedding.table import make_keras_shard, make_sharded


_creating = threading.local()


def creating_shard() -> bool:
    """Whether the variable being created now is a shard of a sharded
    table (hb.scope's rank-0 initial-value broadcast must skip it: each
    rank holds different rows)."""
    return getattr(_creating, "depth", 0) > 0


@contextlib.contextmanager
def creating_shards() -> Iterator[None]:
    """Variables created inside are shards of sharded tables, or optimizer
    slots of them (``creating_shard()`` is true): each rank holds its own
    values, so hb.scope does not broadcast rank 0's initial values (their
    shapes may even differ between ranks)."""
    _creating.depth = getattr(_creating, "depth", 0) + 1
    try:
        yield
    finally:
        _creating.depth -= 1


def shard_plan(name: str, shape: Any) -> Optional[ShardInfo]:
    """The ShardInfo for a table of ``shape`` on this rank, or None when it
    stays replicated (not 2-D, not fully defined, or too few rows).

    A table is sharded when it has at least ``max(world size,
    emb_min_rows_to_shard)`` rows.

    Args:
        name: the table's name (the ShardInfo's, and so the checkpoint's).
        shape: the requested shape (anything tf.TensorShape accepts).

    Returns:
        A ShardInfo over the current world (``hb.context``) holding this
        rank's block, or None.
    """
    shape = tf.TensorShape(shape)
    if shape.rank != 2 or not shape.is_fully_defined():
        return None
    num_rows, dim = int(shape[0]), int(shape[1])
    world = context.world_size
    if num_rows < max(world, int(options.emb_min_rows_to_shard)):
        return None
    return ShardInfo(name, RowPartition(num_rows, world), context.rank, dim)


def _constant_value(initializer: Any) -> Optional[np.ndarray]:
    """The array held by a constant initializer (v1, TF2 or Keras), or None
    when it is not one or holds a scalar."""
    if type(initializer).__name__ != "Constant":
        return None
    value = getattr(initializer, "value", None)
    if value is None or np.ndim(value) == 0:
        return None
    return np.asarray(value)


def _fans(initializer: Any, shape: Tuple[int, int]) -> Tuple[int, int]:
    """(fan_in, fan_out) of a 2-D ``shape`` as a VarianceScaling
    initializer counts them (Keras 3's ``input_axes``/``output_axes``
    when set, else rows and columns, as Keras, tf_keras and TF do)."""
    input_axes = getattr(initializer, "input_axes", None)
    output_axes = getattr(initializer, "output_axes", None)
    if input_axes is not None and output_axes is not None:
        return (int(np.prod([shape[a] for a in input_axes])),
                int(np.prod([shape[a] for a in output_axes])))
    return shape[0], shape[1]


def _scaled_for_whole_table(initializer: Any, info: ShardInfo) -> Any:
    """A VarianceScaling initializer (Keras 3, tf_keras, TF2) that counts
    its fans from the shape it is called with, adjusted so that, called
    for this rank's block, it draws from the whole table's distribution
    (Glorot, He, LeCun: the variance depends on the table's row count).
    Any other initializer is returned as it is.

    Args:
        initializer: the initializer requested for the whole table.
        info: the table's ShardInfo on this rank.

    Returns:
        A shallow copy of ``initializer`` with its ``scale`` adjusted, or
        ``initializer``.
    """
    mode = getattr(initializer, "mode", None)
    scale = getattr(initializer, "scale", None)
    if (mode not in ("fan_in", "fan_out", "fan_avg")
            or not hasattr(initializer, "distribution")
            or not isinstance(scale, numbers.Real)):
        return initializer

    def divisor(shape: Tuple[int, int]) -> float:
        fan_in, fan_out = _fans(initializer, shape)
        if mode == "fan_in":
            return max(1.0, fan_in)
        if mode == "fan_out":
            return max(1.0, fan_out)
        return max(1.0, (fan_in + fan_out) / 2.0)

    whole = divisor((info.num_rows, info.dim))
    local = divisor((info.rows, info.dim))
    if whole == local:
        return initializer
    scaled = copy.copy(initializer)
    scaled.scale = float(scale) * local / whole
    return scaled


def local_initializer(initializer: Any, info: ShardInfo) -> Callable:
    """An initializer for this rank's rows of ``info``'s table.

    A constant initializer holding the whole table is sliced to this
    rank's rows. Any other initializer is called for the local shape with
    TF's partition info (full shape, this rank's row offset), or without
    it when it takes none (TF2 and Keras initializers); a fan-based one
    (Keras' and TF2's VarianceScaling: Glorot, He, LeCun) then has its
    scale adjusted so that the block is drawn with the whole table's
    variance. An initializer class (which get_variable accepts) is
    instantiated first.

    Args:
        initializer: the initializer requested for the whole table (v1,
            TF2 or Keras; an instance or a class).
        info: the table's ShardInfo on this rank.

    Returns:
        A callable ``init(shape, dtype=None, partition_info=None)`` for
        tf.compat.v1.get_variable.

    Raises:
        ValueError: a constant initializer whose value is not of the
            table's shape ``[num_rows, dim]``.
    """
    _PartitionInfo = internals.PARTITION_INFO.load()  # noqa: N806

    if inspect.isclass(initializer):
        # tf.compat.v1.get_variable instantiates an initializer class.
        initializer = initializer()
    begin, end = info.offset, info.offset + info.rows
    constant = _constant_value(initializer)
    if constant is not None:
        if constant.shape != (info.num_rows, info.dim):
            raise ValueError(
                "sharded embedding table %r: constant initializer of shape "
                "%s for a table of shape %s" % (
                    info.name, constant.shape, (info.num_rows, info.dim)))
        rows = constant[begin:end]

        def init(shape, dtype=None, partition_info=None, **_):
            return tf.constant(rows, dtype=dtype)
        return init

    partition = _PartitionInfo(full_shape=[info.num_rows, info.dim],
                               var_offset=[begin, 0])
    without_partition = _scaled_for_whole_table(initializer, info)

    def init(shape, dtype=None, partition_info=None, **_):
        try:
            return initializer(shape, dtype=dtype, partition_info=partition)
        except TypeError as e:
            # TF2 / Keras initializers refuse the argument by name; any
            # other TypeError is the initializer's own and is raised as is.
            if "partition_info" not in str(e):
                raise
            return without_partition(shape, dtype=dtype)
    return init


_suspended = []


@contextlib.contextmanager
def sharding_suspended() -> Iterator[None]:
    """Tables requested inside are plain full-size variables, even inside
    ``hb.embedding_scope`` (used to build serving graphs for export)."""
    _suspended.append(True)
    try:
        yield
    finally:
        _suspended.pop()


def _slot_of_shard(original: Callable) -> Callable:
    """The replacement of one of TF's slot_creator functions
    (hbcore_tf._patches.slot_creator): a slot of a sharded table is
    created in ``creating_shards()``; other slots as TF creates them."""
    @functools.wraps(original)
    def create(primary: Any, *args: Any, **kwargs: Any) -> Any:
        info = shard_info(primary)
        if info is None:
            return original(primary, *args, **kwargs)
        if tf.executing_eagerly() and not info.partition.hashed:
            # TF's slot_creator names the slot of a variable stored as
            # a checkpoint slice after the variable's graph op, which
            # an eager variable lacks (an AttributeError otherwise). A
            # dynamic table's store is no slice: its slots are plain.
            raise NotImplementedError(
                "sharded embedding table %r: tf.compat.v1 optimizers "
                "create slots of sharded tables in tf.compat.v1 graphs "
                "only; eagerly or in a tf.function, use a Keras "
                "optimizer" % info.name)
        with creating_shards():
            slot = original(primary, *args, **kwargs)
        table = dynamic_checkpoint.table_of(primary)
        if table is not None:
            # A dynamic table's slot checkpoints by key, eviction resets
            # its freed rows, and it is rank-local (no broadcast: after a
            # restore each rank's rows are its own keys').
            dynamic_checkpoint.attach(slot, table, store=False)
            tag(slot, info._replace(name=str(slot.name).split(":")[0]))
        return slot
    return create


def _keras_slot_of_shard(original: Callable, optimizer: Any, reference: Any,
                         *args: Any, **kwargs: Any) -> Any:
    """What the Keras slot factories run (hbcore_tf._patches.keras_slots):
    a slot of a sharded table is created in ``creating_shards()`` and
    tagged as the shard ``<table>/<slot>`` (as tf.compat.v1 slots' slices
    are named), so broadcasts of a model's and an optimizer's variables
    leave it alone (hbcore_tf._base.rank_local.is_rank_local)."""
    info = shard_info(reference)
    if info is None:
        return original(optimizer, reference, *args, **kwargs)
    # A dynamic table's slot checkpoints by key from its creation on (a
    # restore deferred until the optimizer builds runs inside it).
    with creating_shards(), dynamic_checkpoint.creating_slots_of(
            dynamic_checkpoint.table_of(reference)):
        slot = original(optimizer, reference, *args, **kwargs)
    slot_name = str(getattr(slot, "name", "slot")).split(":")[0]
    make_keras_shard(slot, info._replace(name="%s/%s" % (
        info.name, slot_name.rsplit("/", 1)[-1])))
    return slot


def install_table_patches() -> None:
    """Installs the TF/Keras patches sharded tables need, at the first
    sharded table (and again at each later one: idempotent, and a tf_keras
    imported since is covered then). Kept for the process: the tables
    outlive any scope, and every patch changes nothing for other
    variables.

    - Optimizer slots of sharded tables are rank-local shards: tf.compat.v1
      optimizers create a slot with ``slot_creator`` (through
      ``get_variable``, so through the sharding getter when the optimizer
      is built inside a sharding scope), Keras optimizers with
      ``add_variable_from_reference`` / ``add_slot``. A slot of a sharded
      table holds this rank's rows of the table's slot: it is created in
      ``creating_shards()``, so the sharding getter does not shard it
      again and hb.scope does not broadcast rank 0's initial value (whose
      shape differs on ranks holding fewer rows).
    - Saver.save and tf.train.Checkpoint saves of sharded tables are
      collective (checkpoint_savers.install_patches).
    """
    slot_creator.install(_slot_of_shard)
    keras_slots.install(_keras_slot_of_shard)
    checkpoint_savers.install_patches()


def _sharding_getter(getter: Callable, name: str, *args: Any,
                     **kwargs: Any) -> Any:
    # While a shard is being created (a table's block, passed on by an
    # enclosing sharding scope's getter, or an optimizer slot of a sharded
    # table), the request is this rank's rows already: never shard it again.
    if not options.sharding or _suspended or creating_shard():
        return getter(name, *args, **kwargs)
    initializer = kwargs.get("initializer")
    shape = kwargs.get("shape")
    if shape is None and initializer is not None and not callable(initializer):
        shape = tf.convert_to_tensor(initializer).shape
    info = shard_plan(name, shape) if shape is not None else None
    if info is None:
        return getter(name, *args, **kwargs)
    partitioner = kwargs.get("partitioner")
    if partitioner is not None:
        if not column_init.active():
            raise ValueError("sharded embedding table %r: a partitioner "
                             "cannot be combined with sharding" % name)
        # A feature-column table is one variable per rank; the partitioner
        # only shapes its initializer's calls (column_init).
        kwargs["partitioner"] = None
    begin, end = info.offset, info.offset + info.rows
    if initializer is not None and not callable(initializer):
        kwargs["initializer"] = tf.convert_to_tensor(initializer)[begin:end]
        kwargs["shape"] = None
    else:
        dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
        if initializer is None and dtype.is_floating:
            initializer = tf.compat.v1.glorot_uniform_initializer()
        if column_init.active() and column_init.is_plain_function(
                initializer):
            kwargs["initializer"] = column_init.column_initializer(
                initializer, info, partitioner)
        elif initializer is not None:
            kwargs["initializer"] = local_initializer(initializer, info)
        kwargs["shape"] = [info.rows, info.dim]
    kwargs["use_resource"] = True
    with creating_shards():
        variable = getter(name, *args, **kwargs)
    if is_sharded(variable):  # reuse of a table made before
        return variable
    install_table_patches()  # the moment: the first sharded get_variable table
    return make_sharded(variable, info._replace(
        name=variable.name.split(":")[0]))


@contextlib.contextmanager
def sharding_variable_scope() -> Iterator[None]:
    """The current variable scope with the sharding getter added."""
    current = tf.compat.v1.get_variable_scope()
    with tf.compat.v1.variable_scope(current, custom_getter=_sharding_getter,
                                     auxiliary_name_scope=False):
        yield
