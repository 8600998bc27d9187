"""Checkpoints of dynamic tables: every row in key order, the same at any
world size (docs/embedding.md, "Dynamic tables").

A dynamic table's store, and each optimizer slot of it, is stored as
DeepRec stores an EmbeddingVariable: tensors named after the variable
with the suffixes

- ``-keys``: int64 ``[N]``, every key of the table, ascending (as int64);
- ``-values``: ``[N, dim]``, the variable's row of each key;
- ``-freqs`` (the store only): int64 ``[N]``, how many times each key
  was looked up (dynamic_table.py, "Counts and admission");
- ``-versions`` (the store only): int64 ``[N]``, each key's version,
  the table's step at its last training lookup (dynamic_table.py,
  "Versions and eviction").

In tf.train.Checkpoint (and tf_keras' TensorFlow-format save_weights) the
names are the variable's object path plus ``/.ATTRIBUTES/-keys`` etc.;
a tf.compat.v1 Saver writes the same tensors under the variable's Saver
name (dynamic_saver.py, with ``redistribute`` and ``restore_rows``).

Collective save (tf.train.Checkpoint's writer, checkpoint_savers.py):
1. ``prepared_save`` runs on every rank, before the objects are
   serialized, over the dynamic variables being saved, grouped by table
   in name order (the same on every rank).
2. Per table: each rank first evicts (DynamicTable.evict: rank-local,
   so the saved table holds the survivors only), then exports its keys
   (the hash map) in key order and allgathers them; with N keys in
   all, rank r is given the keys of global positions
   ``[r * ceil(N / size), (r + 1) * ceil(N / size))`` and one alltoall
   sends every key, with its store and slot rows, to that rank. Each
   rank then holds a contiguous run of the sorted table.
3. Each variable serializes that run as a TF slice of the full tensor
   (``_serialize_to_tensors``), so the collective write of the fixed
   tables (save_protocol.collective_write: parts, merge, canonical form)
   turns the runs into one tensor per name, in key order: the bytes do
   not depend on the world size, and the kill -9 guarantee is that
   protocol's. A rank with no run (N < size) serializes nothing and
   writes no part (save_protocol.NOTHING_WRITTEN); with N == 0 rank 0
   writes empty tensors.

Restore: a variable that is not being saved serializes its own rows as
whole tensors, so TF reads the whole ``-keys`` / ``-values`` tensors and
``_restore_from_tensors`` keeps the keys this rank owns
(``mix(key) % size``): the i-th of them, in key order, gets row i, in
the store and in every slot alike, whatever order TF restores them in;
the table's step becomes the largest version in the checkpoint (the same
on every rank: each reads the whole ``-versions``).
Slot rows from the first free row on are reset to the slot's scratch
row (row ``capacity``, never trained), so rows handed out later start
from the slot's initial value (dynamic_table.py, invariant 2). Every
rank reads the whole tensors: restoring needs memory for the whole
table on each rank.
"""
import contextlib
import math
from typing import (Any, Dict, Iterable, Iterator, List, NamedTuple,
                    Optional, Tuple)

import hbcore
import numpy as np
import tensorflow as tf

from hbcore_tf._base.compat import unwrap_variable
from hbcore_tf._base.context import context
from hbcore_tf._base.rank_local import shard_info
from hbcore_tf.embedding.dynamic_init import mix
from hbcore_tf.embedding.table import variable_subclass

KEYS, VALUES, FREQS, VERSIONS = "-keys", "-values", "-freqs", "-versions"
_TABLE_ATTR = "_hb_dynamic_table"
_STORE_ATTR = "_hb_dynamic_store"
# id(variable) -> its serialized slices, while a save is prepared.
_prepared: Dict[int, Dict[str, Any]] = {}
_classes: Dict[type, type] = {}


class DynamicCheckpointError(ValueError):
    """A checkpoint that does not fit a dynamic table (wrong kind of
    table, or more rows for one rank than its capacity)."""


def table_of(variable: Any) -> Optional[Any]:
    """The DynamicTable whose store or slot ``variable`` is, else None."""
    return getattr(unwrap_variable(variable), _TABLE_ATTR, None)


def _held(table: Any, variables: List[Any]) -> Tuple[np.ndarray,
                                                      List[np.ndarray]]:
    """This rank's keys in key order and each variable's rows of them."""
    keys, rows = table.held()
    keys, rows = keys.numpy(), rows.numpy()
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    return keys, [tf.gather(unwrap_variable(v), rows).numpy() for v in variables]


def _version_column(table: Any, keys: np.ndarray) -> np.ndarray:
    return table.versions(tf.constant(keys, tf.int64)).numpy()


def whole_rows(table: Any, variable: Any) -> Tuple[np.ndarray, np.ndarray]:
    """Every rank's keys of ``table`` in key order and ``variable``'s row
    of each (collective: every rank calls it, for the same variables in the
    same order). Keras' files store a table and its slots this way.

    The table evicts first (a save: idempotent when the same save asks
    again, for the table and then for each slot).

    Args:
        table: a DynamicTable.
        variable: its store or an optimizer slot of it.

    Returns:
        (keys, values): int64 ``[N]`` ascending, and ``[N, dim]``.
    """
    table.evict()
    keys, (values,) = _held(table, [variable])
    path = getattr(variable, "path", None) or variable.name
    name = "hbcore.dynamic_whole.%s" % str(path).replace(":", "_")
    keys = hbcore.allgather(keys, name=name + ".keys")
    values = hbcore.allgather(values, name=name + ".values")
    order = np.argsort(keys, kind="stable")
    return keys[order], values[order]


def _checkpoint_methods(base: type) -> Dict[str, Any]:
    def _serialize_to_tensors(self):
        saved = _prepared.get(id(self))
        if saved is not None:
            return saved
        # Not being saved (TF asks for the names and dtypes to restore):
        # this rank's rows as whole tensors.
        table = getattr(self, _TABLE_ATTR)
        keys, (rows,) = _held(table, [self])
        return _entries(self, keys, rows, table.counts(keys).numpy(),
                        _version_column(table, keys), None)

    def _restore_from_tensors(self, restored_tensors):
        table = getattr(self, _TABLE_ATTR)
        missing = sorted({KEYS, VALUES} - set(restored_tensors))
        if missing:
            raise DynamicCheckpointError(
                "dynamic embedding table %r: the checkpoint holds no %s for "
                "%s (a checkpoint of another kind of table?)" % (
                    table.info.name, "/".join(missing), self.name))
        return restore_rows(table, self, restored_tensors[KEYS],
                            restored_tensors[VALUES],
                            restored_tensors.get(FREQS),
                            restored_tensors.get(VERSIONS))

    return {"_serialize_to_tensors": _serialize_to_tensors,
            "_restore_from_tensors": _restore_from_tensors}


def attach(variable: Any, table: Any, store: bool) -> None:
    """Makes ``variable`` (a dynamic table's store, or an optimizer slot
    of it; a tf.Variable or a Keras variable wrapping one) checkpoint as
    the module docstring says.

    Args:
        variable: the variable.
        table: its DynamicTable.
        store: True for the store, False for a slot.
    """
    inner = unwrap_variable(variable)
    cls = type(inner)
    if cls not in _classes.values():
        if cls not in _classes:
            _classes[cls] = variable_subclass(cls, _checkpoint_methods(cls))
        object.__setattr__(inner, "__class__", _classes[cls])
    object.__setattr__(inner, _TABLE_ATTR, table)
    object.__setattr__(inner, _STORE_ATTR, store)
    if not store:
        table.add_slot(inner)


@contextlib.contextmanager
def creating_slots_of(table: Optional[Any]) -> Iterator[None]:
    """While open, every tf.Variable created is an optimizer slot of
    ``table`` and checkpoints as one (``attach``) from its creation, so a
    restore that TF deferred until the slot exists (Keras builds slots
    after ``Checkpoint.restore``) finds the slot's ``-keys``/``-values``.
    Nothing happens when ``table`` is None.

    Args:
        table: a DynamicTable, or None.
    """
    if table is None:
        yield
        return

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        variable = next_creator(**kwargs)
        attach(variable, table, store=False)
        return variable

    with tf.variable_creator_scope(creator):
        yield


def columns(store: bool, keys: np.ndarray, rows: np.ndarray,
            freqs: np.ndarray, versions: np.ndarray) -> Dict[str, Any]:
    """The arrays a variable is saved as, by suffix: ``-keys`` and
    ``-values``, and for the store ``-freqs`` and ``-versions`` too.

    Args:
        store: whether the variable is the store (else a slot).
        keys, rows, freqs, versions: the keys and the variable's rows,
            counts and versions of them.

    Returns:
        A dict suffix -> array.
    """
    out = {KEYS: keys, VALUES: rows}
    if store:
        out.update({FREQS: freqs, VERSIONS: versions})
    return out


def slice_spec(name: str, shape: List[int], start: int, total: int) -> str:
    """TF's slice spec of rows ``[start, start + shape[0])`` of a
    ``[total] + shape[1:]`` tensor ``name``."""
    return tf.Variable.SaveSliceInfo(
        full_name=name, full_shape=[total] + list(shape[1:]),
        var_offset=[start] + [0] * (len(shape) - 1),
        var_shape=list(shape)).spec


def is_store(variable: Any) -> bool:
    """Whether a dynamic table's variable is its store (else a slot)."""
    return bool(getattr(unwrap_variable(variable), _STORE_ATTR))


def _entries(variable: Any, keys: np.ndarray, rows: np.ndarray,
             freqs: np.ndarray, versions: np.ndarray,
             spec: Optional[Tuple[int, int]]) -> Dict[str, Any]:
    """The serialized tensors of ``variable``: whole (spec None) or as
    rows ``[start, start + len)`` of ``total`` rows (spec (start, total));
    ``freqs`` and ``versions`` of the keys go with the store only."""
    out = {}
    for name, value in columns(is_store(variable), keys, rows, freqs,
                               versions).items():
        if spec is None:
            out[name] = tf.constant(value)
        else:
            out[name] = {slice_spec(name, list(value.shape), *spec):
                         tf.constant(value)}
    return out


class Run(NamedTuple):
    """This rank's contiguous run of a sorted table (``redistribute``):
    rows ``[start, start + len(keys))`` of ``total``."""
    start: int
    total: int
    keys: np.ndarray
    freqs: np.ndarray
    versions: np.ndarray
    rows: List[np.ndarray]


def redistribute(name: str, keys: np.ndarray, rows: List[np.ndarray],
                 freqs: np.ndarray, versions: np.ndarray) -> Run:
    """Step 2 of the save for one table after this rank's eviction
    (collective, numpy in and out): from the keys this rank holds, their
    counts, versions and rows of each variable (in any order) to this
    rank's run of the whole table in key order.

    Args:
        name: the table's name (names the collectives).
        keys: int64 ``[n]``, the keys this rank holds (any order).
        rows: each variable's ``[n, dim]`` rows of them (the store first).
        freqs, versions: int64 ``[n]``.

    Returns:
        This rank's Run; its rows are in each variable's dtype.
    """
    rank, size = context.rank, context.world_size
    name = "hbcore.dynamic_save.%s" % name
    # In key order, so that each destination's rows are contiguous.
    order = np.argsort(keys, kind="stable")
    keys, freqs, versions = keys[order], freqs[order], versions[order]
    rows = [r[order] for r in rows]
    every = np.sort(hbcore.allgather(keys, name=name + ".keys"))
    total = len(every)
    per = max(1, math.ceil(total / size))
    dest = np.searchsorted(every, keys) // per
    splits = np.bincount(dest, minlength=size).tolist()
    widths = [r.shape[1] for r in rows]
    # One float64 row per key: the bits of the key, its count and its
    # version, then its rows of every variable.
    packed = np.concatenate([keys.view(np.float64)[:, None],
                             freqs.view(np.float64)[:, None],
                             versions.view(np.float64)[:, None]] + [
        r.astype(np.float64) for r in rows], axis=1) if keys.size else \
        np.zeros((0, 3 + sum(widths)), np.float64)
    received, _ = hbcore.alltoall(packed, splits, name=name + ".rows")
    received = received[np.argsort(received[:, 0].view(np.int64),
                                   kind="stable")]
    parts, column = [], 3
    for r, width in zip(rows, widths):
        parts.append(received[:, column:column + width].astype(r.dtype))
        column += width
    return Run(min(total, rank * per), total,
               np.ascontiguousarray(received[:, 0]).view(np.int64),
               np.ascontiguousarray(received[:, 1]).view(np.int64),
               np.ascontiguousarray(received[:, 2]).view(np.int64), parts)


def _redistribute(table: Any, variables: List[Any]) -> None:
    """Step 2 of the save for one table (collective): fills _prepared for
    ``variables`` (the store first, then the slots)."""
    table.evict()
    keys, rows = _held(table, variables)
    run = redistribute(table.info.name, keys, rows,
                       table.counts(keys).numpy(),
                       _version_column(table, keys))
    for variable, part in zip(variables, run.rows):
        if run.total == 0:
            _prepared[id(unwrap_variable(variable))] = (
                _entries(variable, run.keys, part, run.freqs, run.versions,
                         None)
                if context.rank == 0 else {})
        elif len(run.keys) == 0:
            _prepared[id(unwrap_variable(variable))] = {}
        else:
            _prepared[id(unwrap_variable(variable))] = _entries(
                variable, run.keys, part, run.freqs, run.versions,
                (run.start, run.total))


def dynamic_variables(objects: Iterable[Any]) -> List[Any]:
    """The stores and slots of dynamic tables among ``objects``."""
    return [o for o in objects if table_of(o) is not None and
            hasattr(unwrap_variable(o), _STORE_ATTR)]


@contextlib.contextmanager
def prepared_save(variables: Iterable[Any]) -> Iterator[None]:
    """While open, the dynamic ``variables`` serialize the save's slices
    (steps 1-3 of the module docstring). Collective: every rank opens it
    with the same tables.

    Args:
        variables: stores and slots of dynamic tables (dynamic_variables).
    """
    groups: Dict[str, Tuple[Any, List[Any]]] = {}
    for v in variables:
        table = table_of(v)
        group = groups.setdefault(table.info.name, (table, []))
        if all(unwrap_variable(v) is not unwrap_variable(w) for w in group[1]):
            group[1].append(v)
    try:
        for name in sorted(groups):
            table, members = groups[name]
            members.sort(key=lambda v: (not is_store(v), shard_info(v).name))
            _redistribute(table, members)
        yield
    finally:
        _prepared.clear()


def restore_rows(table: Any, variable: Any, keys: Any, values: Any,
                 freqs: Any = None, versions: Any = None) -> Any:
    """Restores ``variable`` (the store or a slot of ``table``) from a
    whole table's ``keys`` (ascending) and ``values``: this rank keeps the
    keys it owns, the i-th at row i (the module docstring).

    Args:
        table: the DynamicTable.
        variable: its store or a slot.
        keys: int64 ``[N]``.
        values: ``[N, dim]``.
        freqs: int64 ``[N]``, the keys' counts (the store only; None: 0).
        versions: int64 ``[N]``, the keys' versions (the store only;
            None: 0); the table's step becomes their maximum (0 when N
            is 0).

    Returns:
        The restore op (graphs) or None (eager).

    Raises:
        DynamicCheckpointError: ``values`` has another row width, or this
            rank owns more keys than the table's capacity.
    """
    name, dim, capacity = table.info.name, table.info.dim, table.capacity
    keys = tf.convert_to_tensor(keys, tf.int64)
    values = tf.convert_to_tensor(values)
    if values.shape.rank != 2 or values.shape[1] != dim:
        raise DynamicCheckpointError(
            "dynamic embedding table %r: the checkpoint's rows of %s have "
            "shape %s, expected [N, %d]" % (name, variable.name,
                                            values.shape, dim))
    owners = mix(tf.bitcast(keys, tf.uint64)) % tf.constant(
        context.world_size, tf.uint64)
    own = tf.equal(owners, tf.constant(context.rank, tf.uint64))
    keys, values = tf.boolean_mask(keys, own), tf.boolean_mask(values, own)
    if freqs is not None:
        freqs = tf.boolean_mask(tf.convert_to_tensor(freqs, tf.int64), own)
    step = None
    if versions is not None:
        versions = tf.convert_to_tensor(versions, tf.int64)
        # Every rank reads the whole tensor: the same step everywhere.
        step = tf.reduce_max(tf.concat([versions, [0]], axis=0))
        versions = tf.boolean_mask(versions, own)
    count = tf.size(keys, out_type=tf.int64)
    fits = tf.debugging.assert_less_equal(
        count, tf.constant(capacity, tf.int64),
        message="dynamic embedding table '%s': the checkpoint has more keys "
        "for rank %d than its capacity of %d rows (raise the layer's "
        "capacity= argument)" % (name, context.rank, capacity))
    inner = unwrap_variable(variable)
    with tf.control_dependencies([fits]):
        rows = tf.range(count)
        ops = [inner.scatter_update(tf.IndexedSlices(
            tf.cast(values, inner.dtype), rows))]
        if getattr(inner, _STORE_ATTR):
            ops.append(table.replace_keys(keys, rows, freqs, versions, step))
        else:
            # Rows not restored start again from the slot's initial value,
            # which the scratch row (never trained) still holds.
            free = tf.range(count, capacity)
            scratch = tf.gather(inner, [capacity])
            ops.append(inner.scatter_update(tf.IndexedSlices(
                tf.tile(scratch, [tf.size(free), 1]), free)))
    return tf.group(ops)
