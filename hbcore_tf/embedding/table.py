"""A sharded embedding table: one logical variable, one block of rows per
rank.

On every rank the table is an ordinary resource variable holding this
rank's rows (``RowPartition``), tagged with a ``ShardInfo``
(hbcore_tf._base.rank_local). What makes it behave as the whole table:

- Lookups: the variable's class is swapped for a subclass whose
  ``sparse_read`` runs the sharded lookup (hbcore_tf.embedding.exchange).
  ``tf.nn.embedding_lookup``, ``embedding_lookup_sparse``,
  ``safe_embedding_lookup_sparse`` and ``tf.gather`` all read a resource
  variable through ``sparse_read``, so user code is unchanged. Dense reads
  (``read_value``, ``tf.convert_to_tensor``) see this rank's rows only:
  a sharded table is read by lookups.
- Gradients: the lookup's backward pass delivers this rank's rows'
  gradient, already combined over all ranks and scaled to the global
  average (an IndexedSlices on the local shard). The gradient reductions
  (hbcore_tf._parallel.gradient_reduction) pass gradients of sharded tables through
  unchanged: they are never allreduced.
- Checkpoints: the variable carries TF's ``SaveSliceInfo`` for its block of
  the full ``[num_rows, dim]`` tensor under the table's own name, so
  ``tf.compat.v1.train.Saver`` saves and restores it as a slice of the full
  table, and optimizer slots inherit slices of their own (see save_protocol.py);
  its ``_serialize_to_tensors`` gives tf.train.Checkpoint the same slice.

A Keras table (hbcore_tf.keras.layers.ShardedEmbedding) runs its own
lookup: ``make_keras_shard`` tags it and each of its optimizer slots and
gives them the same checkpoint slice, without the lookup class.
"""
from typing import Any, Dict

import tensorflow as tf

from hbcore_tf._base.rank_local import (ShardInfo, note_table, shard_info,
                                        tag)
from hbcore_tf._patches import internals
from hbcore_tf.embedding.exchange import sharded_lookup

_lookup_classes: Dict[type, type] = {}
_slice_classes: Dict[type, type] = {}


def _checkpoint_methods(base: type) -> Dict[str, Any]:
    """tf.train.Checkpoint's (de)serialization of a variable holding a
    checkpoint slice: this rank's rows as a slice of the full table
    ({key: {slice_spec: tensor}}, as partitioned variables)."""
    def _serialize_to_tensors(self):
        spec = self._save_slice_info.spec
        return {key: {spec: tensor} for key, tensor in
                base._serialize_to_tensors(self).items()}

    def _restore_from_tensors(self, restored_tensors):
        flat = {key: (next(iter(value.values()))
                      if isinstance(value, dict) else value)
                for key, value in restored_tensors.items()}
        return base._restore_from_tensors(self, flat)

    return {"_serialize_to_tensors": _serialize_to_tensors,
            "_restore_from_tensors": _restore_from_tensors,
            "_hb_checkpoint_slice": True}


def variable_subclass(base: type, methods: Dict[str, Any]) -> type:
    """A subclass of a resource-variable class with ``methods`` (same name
    and module, so the variable still reads as its own class).

    Args:
        base: the variable's class.
        methods: the attributes the subclass adds or overrides.

    Returns:
        The new class.
    """
    return type(base.__name__, (base,), dict(
        methods, __module__=base.__module__, __qualname__=base.__qualname__,
        __doc__=base.__doc__))


def _lookup_class(base: type) -> type:
    """The subclass of a resource-variable class whose ``sparse_read`` is
    the sharded lookup, and which checkpoints as a slice."""
    if base not in _lookup_classes:
        def sparse_read(self, indices, name=None):
            return sharded_lookup(
                lambda local_ids: base.sparse_read(self, local_ids),
                shard_info(self), indices, self.dtype, name=name)

        _lookup_classes[base] = variable_subclass(base, dict(
            _checkpoint_methods(base), sparse_read=sparse_read,
            _hb_sharded_lookup=True))
    return _lookup_classes[base]


def _slice_class(base: type) -> type:
    """The subclass of a resource-variable class that checkpoints as a
    slice (reads unchanged: Keras layers run the lookup themselves)."""
    if base not in _slice_classes:
        _slice_classes[base] = variable_subclass(
            base, _checkpoint_methods(base))
    return _slice_classes[base]


def _set_slice(variable: Any, info: ShardInfo) -> None:
    variable._set_save_slice_info(tf.Variable.SaveSliceInfo(
        full_name=info.name, full_shape=[info.num_rows, info.dim],
        var_offset=[info.offset, 0], var_shape=[info.rows, info.dim]))


def make_keras_shard(variable: Any, info: ShardInfo) -> None:
    """Marks a Keras table's variable, or an optimizer slot of one, as the
    local shard described by ``info`` (``tag``) and makes tf.train.Checkpoint
    (and so tf_keras's TensorFlow-format save_weights) store it as its rows
    of the full ``[num_rows, dim]`` tensor: the parts the ranks write merge
    into the whole table (hbcore_tf.embedding.save_protocol), and each rank
    restores its own rows at any world size. Keras 3 variables delegate
    checkpointing to the tf.Variable inside, which gets the slice. A slot of
    another shape (a factored one), and the store of a dynamic table or a
    slot of it, are tagged only.

    Args:
        variable: the Keras table's variable, or one of its optimizer
            slots (a Keras variable or a tf.Variable).
        info: the table's ShardInfo on this rank.
    """
    tag(variable, info)
    if info.partition.hashed:
        return  # a dynamic table's store: no slice of a whole table
    inner = getattr(variable, "value", None)
    if isinstance(inner, tf.Variable) and inner is not variable:
        variable = inner
    if (not isinstance(variable, internals.BASE_RESOURCE_VARIABLE.load())
            or tuple(variable.shape.as_list()) != (info.rows, info.dim)):
        return
    cls = type(variable)
    if not getattr(cls, "_hb_checkpoint_slice", False):
        object.__setattr__(variable, "__class__", _slice_class(cls))
    _set_slice(variable, info)


def make_sharded(variable: Any, info: ShardInfo) -> Any:
    """Turns a resource variable holding this rank's rows into the sharded
    table's shard: tags it, gives it the lookup class and the checkpoint
    slice of the full table.

    Args:
        variable: this rank's rows, a resource variable of shape
            ``[info.rows, info.dim]``.
        info: the table's ShardInfo on this rank (``info.name`` is the
            full table's checkpoint name).

    Returns:
        ``variable`` itself, now the shard (its class is swapped in
        place).

    Raises:
        TypeError: not a resource variable (create tables with
            ``use_resource=True``; embedding_scope does).
    """
    if not isinstance(variable, internals.BASE_RESOURCE_VARIABLE.load()):
        raise TypeError("sharded embedding table %r must be a resource "
                        "variable, got %s" % (info.name, type(variable).__name__))
    tag(variable, info)
    note_table(info.name)
    cls = type(variable)
    if not getattr(cls, "_hb_sharded_lookup", False):
        object.__setattr__(variable, "__class__", _lookup_class(cls))
    _set_slice(variable, info)
    return variable
