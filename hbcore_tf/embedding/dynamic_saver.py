"""Dynamic tables in a tf.compat.v1 Saver: the same checkpoint layout and
bytes as tf.train.Checkpoint writes (dynamic_checkpoint.py), from a graph.

A Saver's variables may include dynamic tables' stores and their
optimizer slots (``hb.get_embedding_variable``, PAIEV feature columns,
hb.keras.layers.DynamicEmbedding in a graph). TF's Saver would write each
as its rank's ``[capacity + 1, dim]`` rows; instead they are taken out of
the Saver's variables before TF builds it (checkpoint_savers.py) and
saved and restored here, by key, under the name the Saver would have
given them (the variable's op name, or its key in a var_list dict) plus
dynamic_checkpoint's suffixes (``-keys``, ``-values``, ``-freqs``,
``-versions``; slots ``-keys`` and ``-values``).

Ops (built with the Saver, before MonitoredTrainingSession finalizes the
graph; the same ops on every rank, tables in name order):
- per table, one read: the table evicts (``DynamicTable.evict``), then
  its keys, their counts and versions, and the rows of the store and of
  each slot (plain reads of the variables, never lookups);
- per variable, a restore from a filename placeholder: ``RestoreV2`` of
  the whole tensors, then ``dynamic_checkpoint.restore_rows`` (this rank
  keeps the keys it owns). It first initializes the variable (a restore
  from a checkpoint runs before any init op in MonitoredTrainingSession)
  and the table's local state (whose initializers skip variables already
  initialized, so the local init op that follows keeps the restore).

Save (``prepare``, every rank, collective): one Session.run of the reads,
then ``dynamic_checkpoint.redistribute`` gives each rank a contiguous run
of the sorted table, written as slices of the full tensors
(``write_bundle``) into the rank's part of the collective write
(save_protocol.collective_write), which merges the parts and rewrites
them in canonical form: the bytes do not depend on the world size.
"""
from typing import Any, Dict, List, Tuple

import numpy as np
import tensorflow as tf

from hbcore_tf._base.compat import unwrap_variable
from hbcore_tf._base.context import context
from hbcore_tf.embedding.dynamic_checkpoint import (FREQS, KEYS, VALUES,
                                                   VERSIONS, columns,
                                                   is_store, redistribute,
                                                   restore_rows, slice_spec,
                                                   table_of)

_V1 = tf.compat.v1
# tensor name -> (TF slice spec, "" for a whole tensor; value)
Entries = Dict[str, Tuple[str, np.ndarray]]


def split_dynamic(var_list: Any) -> Tuple[Any, List[Tuple[str, Any]]]:
    """Takes the dynamic tables' variables out of a Saver's var_list.

    Args:
        var_list: a list of variables (and saveables, and lists of
            slices) or a dict name -> variable.

    Returns:
        (the rest, of the same kind; [(checkpoint name, variable)] of the
        dynamic variables taken out).
    """
    if isinstance(var_list, dict):
        named = [(k, v) for k, v in var_list.items()
                 if isinstance(v, tf.Variable) and table_of(v) is not None]
        taken = {k for k, _ in named}
        return {k: v for k, v in var_list.items() if k not in taken}, named
    named, rest = [], []
    for v in var_list:
        if isinstance(v, tf.Variable) and table_of(v) is not None:
            named.append((v.op.name, v))
        else:
            rest.append(v)
    return rest, named


class DynamicSaver:
    """The ops that save and restore one Saver's dynamic tables (module
    docstring). Built in the Saver's graph, on every rank alike.

    Args:
        named: [(checkpoint name, variable)], stores and slots of dynamic
            tables.
    """

    def __init__(self, named: List[Tuple[str, Any]]) -> None:
        groups: Dict[str, Tuple[Any, List[Tuple[str, Any]]]] = {}
        for name, v in named:
            table = table_of(v)
            groups.setdefault(table.info.name, (table, []))[1].append(
                (name, v))
        self.tables = sorted(groups)
        self._groups = []
        with tf.name_scope("hb_dynamic_saver"):
            self.filename = _V1.placeholder(tf.string, [], name="filename")
            restores = []
            for table_name in self.tables:
                table, members = groups[table_name]
                # The store first (its counts and versions), then slots.
                members.sort(key=lambda m: (not is_store(m[1]), m[0]))
                self._groups.append((table, members,
                                     self._read(table, members)))
                restores += [self._restore(table, name, v)
                             for name, v in members]
            self.restore_op = tf.group(restores)

    @staticmethod
    def _read(table: Any, members: List[Tuple[str, Any]]) -> Dict[str, Any]:
        with tf.control_dependencies([table.evict()]):
            keys, rows = table.held()
        keys.set_shape([None])  # the map's op leaves it unknown in graphs
        rows.set_shape([None])
        return {"keys": keys, "freqs": table.counts(keys),
                "versions": table.versions(keys),
                "rows": [tf.gather(unwrap_variable(v).read_value(), rows)
                         for _, v in members]}

    def _restore(self, table: Any, name: str, variable: Any) -> Any:
        inner = unwrap_variable(variable)
        store = is_store(variable)
        suffixes = [KEYS, VALUES] + ([FREQS, VERSIONS] if store else [])
        dtypes = [tf.int64, inner.dtype.base_dtype] + [tf.int64] * (
            len(suffixes) - 2)
        inits = [inner.initializer] + [v.initializer
                                       for v in table.state_variables()]
        with tf.control_dependencies(inits):
            tensors = tf.raw_ops.RestoreV2(
                prefix=self.filename,
                tensor_names=[name + s for s in suffixes],
                shape_and_slices=[""] * len(suffixes), dtypes=dtypes)
            for column in tensors[:1] + tensors[2:]:
                column.set_shape([None])
            values = tf.ensure_shape(
                tensors[1], [None, table.info.dim],
                name="%s_rows_of_width_%d" % (
                    table.info.name.replace("/", "_"), table.info.dim))
            extra = list(tensors[2:]) + [None] * (4 - len(tensors))
            return restore_rows(table, variable, tensors[0], values, *extra)

    def prepare(self, sess: Any) -> Entries:
        """Evicts, reads and redistributes every table (collective: every
        rank calls it for the same Saver).

        Args:
            sess: the session.

        Returns:
            This rank's slices to write, by tensor name.
        """
        fetched = sess.run([g[2] for g in self._groups])
        entries: Entries = {}
        for (table, members, _), got in zip(self._groups, fetched):
            run = redistribute(table.info.name, got["keys"], got["rows"],
                               got["freqs"], got["versions"])
            for (name, v), part in zip(members, run.rows):
                if run.total and not len(run.keys):
                    continue  # fewer keys than ranks: nothing here
                if not run.total and context.rank > 0:
                    continue  # an empty table: rank 0 writes it whole
                for suffix, value in columns(is_store(v), run.keys, part,
                                             run.freqs,
                                             run.versions).items():
                    spec = slice_spec(name + suffix, list(value.shape),
                                      run.start, run.total) \
                        if run.total else ""
                    entries[name + suffix] = (spec, value)
        return entries

    def restore(self, sess: Any, save_path: str) -> None:
        """Restores every table from the checkpoint ``save_path`` (this
        rank's keys).

        Args:
            sess: the session.
            save_path: a checkpoint prefix.
        """
        sess.run(self.restore_op, {self.filename: save_path})


def write_bundle(prefix: str, entries: Entries) -> None:
    """Writes ``entries`` as the V2 checkpoint ``prefix`` (a private graph:
    the caller's is usually finalized).

    Args:
        prefix: the checkpoint prefix.
        entries: tensor name -> (slice spec, value).
    """
    names = sorted(entries)
    with tf.Graph().as_default():
        op = tf.raw_ops.SaveV2(
            prefix=prefix, tensor_names=names,
            shape_and_slices=[entries[n][0] for n in names],
            tensors=[tf.constant(entries[n][1]) for n in names])
        with _V1.Session() as session:
            session.run(op)
