"""A dynamic embedding table: int64 or string ids, no row count, rows
created on first lookup (docs/architecture.md, "Dynamic embedding tables
(design)"; docs/embedding.md, "Dynamic tables").

On every rank the table is
- a hash map (``tf.lookup.experimental.MutableHashTable``) from key to a
  row of this rank's store, and
- the store: a ``[capacity + 1, dim]`` variable made by the caller (the
  Keras layer's weight), tagged rank-local with a ``ShardInfo`` whose
  partition is a ``HashPartition``, so gradient reductions pass its
  gradient through and broadcasts skip it and its optimizer slots.

A lookup is ``exchange.sharded_lookup`` with the hashed partition: the
ids' keys go to their owners (``mix(key) % world``), each owner turns the
keys into rows (``_read_rows``: creating the missing ones) and sends the
rows back. Invariants of the store, which make the optimizers' slots
right:
1. Rows are handed out from the free list (rows freed by eviction, the
   last freed first), then in order from the high-water mark ``next``
   (rows ``[next, capacity)`` were never handed out since the last
   restore). A row handed out belongs to exactly one key until that key
   is evicted; size() + free rows == next.
2. A row is written by the lookup only when it is handed out (its
   initial values, from ``KeyInitializer``); after that only the
   optimizer writes it. A row never handed out has never had a gradient,
   so its optimizer slots hold their initial values; eviction resets the
   slot rows of the rows it frees to those values (the slots' scratch
   row, below), so a row handed out again trains as a new one. The
   slots are the ones registered with ``add_slot`` (Keras optimizers'
   and tf.compat.v1 optimizers' slots of the store register themselves
   when they are created: hbcore_tf.embedding.sharding).
3. Row ``capacity`` is a scratch row: keys without a row (not admitted
   yet, or no free row left) gather it, and their lookup gives 0 instead
   (so their gradient, 0, lands there and no key's row moves). A key
   that found no free row sets its owner's status, which travels back
   to every rank with the rows (one extra row per segment of the rows
   alltoall), so the lookup fails on every rank after both exchanges,
   naming the table and the full rank.

Counts and admission: every lookup counts each key's occurrences in all
ranks' ids (``sharded_lookup``'s count_ids: the counts travel beside the
keys) and the owner adds them to a second map, key -> count, which holds
every key looked up, admitted or not (DeepRec's counter filter keeps the
same). With ``filter_freq`` F > 0 a key without a row gets one once its
count, this lookup's occurrences included, reaches F; before that it
reads 0 (DeepRec's ``default_value_no_permission``) and is not trained.
A key that has a row keeps it (a restored key too, whatever its count)
until it is evicted.

Versions and eviction (DeepRec's GlobalStepEvict / L2WeightEvict): the
table's step counts its training lookups (made under a recording
GradientTape: ``model.fit``'s step, a custom loop's forward pass, or
``lookup(training=True)``); every rank makes the same lookups, so every
rank has the same step. A training lookup bumps the step and sets the
version of every key it reads that has a row to the new step (DeepRec
sets it at the forward pass too). ``evict`` runs on the owner only, from
its own state, with no collective: a key whose row has ``step - version >
steps_to_live``, or ``0.5 * sum(row ** 2) < l2_weight_threshold``, loses
its row, its count and its version; its row goes on the free list. It
runs when the table is saved (DeepRec's moment: every save path calls it
first, on every rank, so every rank evicts at the same step) or when the
user calls it, on every rank alike.
"""
import weakref
from typing import Any, List, Optional, Tuple

import tensorflow as tf

from hbcore_tf._base import compat
from hbcore_tf._base.context import context
from hbcore_tf._base.rank_local import ShardInfo
from hbcore_tf.embedding.dynamic_init import KeyInitializer
from hbcore_tf.embedding.ev_option import Eviction
from hbcore_tf.embedding.exchange import sharded_lookup
from hbcore_tf.embedding.partition import HashPartition

KEY_DTYPES = ("int64", "string")
# String ids become int64 keys: TF's 64-bit FarmHash fingerprint, reduced
# into [0, 2**63 - 1) (to_hash_bucket_fast's only lossy step).
_STRING_BUCKETS = 2 ** 63 - 1


def check_key_dtype(key_dtype: Any, table: str) -> str:
    """The key dtype's name ("int64" or "string").

    Args:
        key_dtype: "int64" / "string" or the tf.DType.
        table: the table's name, for the error.

    Returns:
        "int64" or "string".

    Raises:
        ValueError: another dtype.
    """
    try:
        name = tf.as_dtype(key_dtype).name
    except TypeError:
        name = str(key_dtype)
    if name not in KEY_DTYPES:
        raise ValueError("dynamic embedding table %r: key_dtype must be "
                         "int64 or string, got %r" % (table, key_dtype))
    return name


def _local_variable(initial: Any, name: str) -> tf.Variable:
    """A variable of this rank's table state (versions, step, free list):
    out of Keras' tracking and, in tf.compat.v1 graphs, a local variable,
    so no broadcast of global variables overwrites it with rank 0's.

    In graphs its initializer skips it once it is initialized: a
    tf.compat.v1 Saver's restore of the table (dynamic_saver.py) runs
    before MonitoredTrainingSession's local init op, which must keep it.
    """
    with tf.init_scope():
        variable = tf.compat.v1.Variable(
            initial, trainable=False, name=name, use_resource=True,
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        if not tf.executing_eagerly():
            value = variable.initial_value

            def assign() -> tf.Tensor:
                # Built in the branch, so that only this branch runs it.
                with tf.control_dependencies([variable.assign(value)]):
                    return tf.constant(False)

            once = tf.cond(variable.is_initialized(),
                           lambda: tf.constant(True), assign,
                           name=name + "_init_once")
            object.__setattr__(variable, "_initializer_op", once.op)
        return variable


def ids_to_keys(ids: Any, key_dtype: str, table: str) -> tf.Tensor:
    """The int64 keys of ``ids`` (same shape): integer ids cast to int64,
    strings hashed to their 64-bit fingerprint. Stock TF ops only, so the
    serving graph of an exported table uses it too.

    Args:
        ids: integer ids (int64 tables) or strings (string tables).
        key_dtype: "int64" or "string".
        table: the table's name, for the error.

    Returns:
        An int64 tensor.

    Raises:
        TypeError: ids of another dtype; the message names the table.
    """
    ids = tf.convert_to_tensor(ids)
    if key_dtype == "string":
        if ids.dtype != tf.string:
            raise TypeError(
                "dynamic embedding table %r: key_dtype is string, got "
                "%s ids" % (table, ids.dtype.name))
        return tf.strings.to_hash_bucket_fast(ids, _STRING_BUCKETS)
    if not ids.dtype.is_integer:
        raise TypeError(
            "dynamic embedding table %r: key_dtype is int64, got %s "
            "ids" % (table, ids.dtype.name))
    return tf.cast(ids, tf.int64)


class DynamicTable:
    """This rank's part of one dynamic table (see the module docstring).

    Cross-rank contract: every rank creates the table with the same name,
    dim, capacity and initializer, and runs the same lookups in the same
    order (each is two alltoalls, and two more in the backward pass).

    Args:
        name: the table's name (errors, collective names).
        store: this rank's ``[capacity + 1, dim]`` tf.Variable.
        key_dtype: "int64" or "string".
        initializer: the initial rows per key.
        filter_freq: the count at which a key is admitted (0: at once;
            ``ev_option.admission_threshold``).
        evict: the eviction policy (``ev_option.eviction``), or None.
    """

    def __init__(self, name: str, store: tf.Variable, key_dtype: str,
                 initializer: KeyInitializer, filter_freq: int = 0,
                 evict: Optional[Eviction] = None) -> None:
        rows, dim = store.shape.as_list()
        self.info = ShardInfo(name, HashPartition(rows - 1,
                                                  context.world_size),
                              context.rank, dim)
        self.key_dtype = check_key_dtype(key_dtype, name)
        self._store = store
        self._initializer = initializer
        self.filter_freq = int(filter_freq)
        self.evict_policy = evict
        self._slots: List[tf.Variable] = []
        # tf.compat.v1 graph -> the last owner's stage built in it
        # (_read_rows orders the stages).
        self._last_stage: "weakref.WeakKeyDictionary" = \
            weakref.WeakKeyDictionary()
        prefix = name.replace("/", "_")
        self._versions = _local_variable(tf.zeros([rows], tf.int64),
                                         prefix + "_versions")
        self._step = _local_variable(tf.constant(0, tf.int64),
                                     prefix + "_step")
        # The free list, a stack: rows _free[:_free_count] (see invariant
        # 1), and the high-water mark.
        self._free = _local_variable(tf.zeros([rows - 1], tf.int64),
                                     prefix + "_free")
        self._free_count = _local_variable(tf.constant(0, tf.int64),
                                           prefix + "_free_count")
        self._next = _local_variable(tf.constant(0, tf.int64),
                                     prefix + "_next")
        # checkpoint=False: the maps are this rank's state, saved by key
        # through the store (dynamic_checkpoint.py); in graphs TF's Saver
        # would otherwise write each map (SAVEABLE_OBJECTS).
        self._map = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int64, default_value=-1,
            name="%s_keys" % name.replace("/", "_"), checkpoint=False)
        self._counts = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int64, default_value=0,
            name="%s_counts" % name.replace("/", "_"), checkpoint=False)

    @property
    def capacity(self) -> int:
        """Rows this rank can hold."""
        return self.info.partition.capacity

    @property
    def store(self) -> tf.Variable:
        """This rank's ``[capacity + 1, dim]`` rows."""
        return self._store

    def size(self) -> tf.Tensor:
        """Rows held on this rank (keys it owns that were looked up).

        Returns:
            An int64 scalar.
        """
        return self._map.size()

    def held(self) -> Tuple[tf.Tensor, tf.Tensor]:
        """The keys this rank holds and their rows of the store (in the
        map's order).

        Returns:
            (keys, rows): two int64 vectors.
        """
        return self._map.export()

    def counts(self, keys: tf.Tensor) -> tf.Tensor:
        """How many times each of ``keys`` was looked up in all (0 for a
        key never looked up, or evicted since; restored keys: the
        checkpoint's count).

        Args:
            keys: int64 keys this rank owns.

        Returns:
            An int64 tensor shaped as ``keys``.
        """
        return self._counts.lookup(keys)

    def versions(self, keys: tf.Tensor) -> tf.Tensor:
        """The version of each of ``keys`` (the step of its last training
        lookup; the checkpoint's for a restored key not looked up since),
        -1 for a key without a row.

        Args:
            keys: int64 keys this rank owns.

        Returns:
            An int64 tensor shaped as ``keys``.
        """
        index = self._lookup_index(keys)
        held = tf.gather(self._versions, tf.maximum(index, 0))
        return tf.where(index >= 0, held, tf.constant(-1, tf.int64))

    def step(self) -> tf.Tensor:
        """The table's step: its training lookups so far (after a restore,
        the largest version restored, and counting on from there).

        Returns:
            An int64 scalar.
        """
        return tf.identity(self._step)

    def state_variables(self) -> List[tf.Variable]:
        """This rank's table state besides the store and the two maps
        (versions, step, free list, high-water mark): local variables.

        Returns:
            The variables.
        """
        return [self._versions, self._step, self._free, self._free_count,
                self._next]

    def add_slot(self, slot: tf.Variable) -> None:
        """Registers an optimizer slot of the store (same rows): eviction
        resets the slot's rows it frees (invariant 2). Idempotent.

        Args:
            slot: a ``[capacity + 1, dim]`` tf.Variable.
        """
        if all(slot is not other for other in self._slots):
            self._slots.append(slot)

    def replace_keys(self, keys: tf.Tensor, rows: tf.Tensor,
                     counts: Optional[tf.Tensor] = None,
                     versions: Optional[tf.Tensor] = None,
                     step: Optional[tf.Tensor] = None) -> Any:
        """Makes the map hold exactly ``keys`` -> ``rows`` (a restore:
        rows ``[0, len(keys))``, the free list empty, so invariant 1
        holds again), the counts exactly ``keys`` -> ``counts``, and the
        versions of those rows ``versions``.

        Args:
            keys: int64 keys this rank owns.
            rows: their rows, ``0 .. len(keys) - 1``.
            counts: their counts (None: 0).
            versions: their versions (None: 0).
            step: the table's step from now on (None: unchanged).

        Returns:
            The op (graphs) or None (eager).
        """
        if counts is None:
            counts = tf.zeros_like(keys)
        if versions is None:
            versions = tf.zeros_like(keys)
        ops = []
        for table, values in ((self._map, rows), (self._counts, counts)):
            old, _ = table.export()
            with tf.control_dependencies([table.remove(old)]):
                ops.append(table.insert(keys, values))
        ops += [self._versions.scatter_update(tf.IndexedSlices(
                    tf.cast(versions, tf.int64), rows)),
                self._free_count.assign(0),
                self._next.assign(tf.size(keys, out_type=tf.int64))]
        if step is not None:
            ops.append(self._step.assign(step))
        return tf.group(ops)

    def evict(self) -> tf.Tensor:
        """Drops the rows that the eviction policy condemns (the module
        docstring), on this rank, with no collective: their keys, counts
        and versions go, the rows go on the free list, and every
        registered slot's rows of them are reset to the slot's scratch
        row. Nothing happens without a policy. Run it on every rank at
        the same step (the save paths do).

        Returns:
            The number of rows freed on this rank (an int64 scalar; in
            graphs, running it runs the eviction).
        """
        policy = self.evict_policy
        if policy is None:
            return tf.constant(0, tf.int64)
        keys, rows = self._map.export()
        keys.set_shape([None])  # the map's op leaves it unknown in graphs
        rows.set_shape([None])
        if policy.steps_to_live is not None:
            age = self._step - tf.gather(self._versions, rows)
            dead = age > policy.steps_to_live
        else:
            values = tf.gather(self._store, rows)
            weight = 0.5 * tf.reduce_sum(tf.square(values), axis=1)
            dead = weight < tf.cast(policy.l2_weight_threshold,
                                    values.dtype)
        keys, rows = tf.boolean_mask(keys, dead), tf.boolean_mask(rows, dead)
        freed = tf.size(rows, out_type=tf.int64)
        top = self._free_count.read_value()
        push = self._free.scatter_update(tf.IndexedSlices(
            rows, top + tf.range(freed)))
        ops = [self._map.remove(keys), self._counts.remove(keys), push]
        for slot in self._slots:
            scratch = tf.gather(slot, [self.capacity])
            ops.append(slot.scatter_update(tf.IndexedSlices(
                tf.tile(scratch, [freed, 1]), rows)))
        with tf.control_dependencies([push]):
            ops.append(self._free_count.assign(top + freed))
        with tf.control_dependencies(ops):
            return tf.identity(freed)

    def keys(self, ids: Any) -> tf.Tensor:
        """The int64 keys of ``ids`` (same shape): ``ids_to_keys``.

        Raises:
            TypeError: see ``ids_to_keys``.
        """
        return ids_to_keys(ids, self.key_dtype, self.info.name)

    def _lookup_index(self, keys: tf.Tensor) -> tf.Tensor:
        """The map's row of each key (-1 where it has none), shaped as
        ``keys`` (the map's op leaves the shape unknown in graphs)."""
        index = self._map.lookup(keys)
        index.set_shape(keys.shape)
        return index

    def _count(self, keys: tf.Tensor, occurrences: tf.Tensor
               ) -> Tuple[tf.Tensor, Any]:
        """Adds ``occurrences`` to the counts of ``keys`` (which may
        repeat when ids are not deduplicated, emb_unique=False); returns
        (each key's new count, the update op)."""
        distinct, at = tf.unique(keys, out_idx=tf.int64)
        added = tf.math.unsorted_segment_sum(
            occurrences, at, tf.size(distinct, out_type=tf.int64))
        counts = self._counts.lookup(distinct) + added
        update = self._counts.insert(distinct, counts)
        counts = tf.gather(counts, at)
        counts.set_shape(keys.shape)  # the map's op leaves it unknown
        return counts, update

    def _allocate(self, count: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor,
                                                   Any]:
        """Rows for ``count`` new keys (invariant 1): the free list's top
        first, then from the high-water mark; returns (rows, whether each
        fits, the update of the free list and the mark). A row that does
        not fit is ``capacity`` or more."""
        top = self._free_count.read_value()
        start = self._next.read_value()
        reused = tf.minimum(count, top)
        fresh = count - reused
        rows = tf.concat([
            tf.reverse(self._free[top - reused:top], [0]),
            start + tf.range(fresh)], axis=0)
        used = tf.minimum(fresh, self.capacity - start)
        update = tf.group(self._free_count.assign(top - reused),
                          self._next.assign(start + used))
        return rows, rows < self.capacity, update

    def _read_rows(self, keys: tf.Tensor, occurrences: tf.Tensor,
                   step: Optional[tf.Tensor] = None
                   ) -> Tuple[tf.Tensor, tf.Tensor]:
        """The owner's stage: rows of ``keys`` (keys this rank owns),
        counting them and creating the rows of admitted keys that have
        none (and, for a training lookup, ``step`` not None, setting
        their versions to ``step``); and this owner's status for every
        rank: rank + 1 when some key found no free row, else 0.

        Several lookups of one table in one tf.compat.v1 graph (shared
        embedding columns, a layer called twice) run their stages one
        after the other, in the order they were built: a stage hands out
        free rows, so two stages running at once in a Session.run would
        hand the same rows to different keys. The order is the graph's,
        the same on every rank. In a tf.function, TensorFlow's automatic
        control dependencies already order ops on the same resources.
        """
        graph = None if tf.executing_eagerly() else \
            tf.compat.v1.get_default_graph()
        if graph is not None and graph.building_function:
            graph = None
        before = self._last_stage.get(graph) if graph is not None else None
        with tf.control_dependencies([] if before is None else [before]):
            rows, status = self._owner_rows(keys, occurrences, step)
        if graph is not None:
            self._last_stage[graph] = rows.op
        return rows, status

    def _owner_rows(self, keys: tf.Tensor, occurrences: tf.Tensor,
                    step: Optional[tf.Tensor]
                    ) -> Tuple[tf.Tensor, tf.Tensor]:
        """``_read_rows`` without the ordering between stages."""
        counts, count = self._count(keys, occurrences)
        index = self._lookup_index(keys)
        wanted = tf.logical_and(index < 0, counts >= self.filter_freq)
        new, _ = tf.unique(tf.boolean_mask(keys, wanted))
        rows, fits, allocate = self._allocate(tf.size(new, out_type=tf.int64))
        new, rows = tf.boolean_mask(new, fits), tf.boolean_mask(rows, fits)
        insert = self._map.insert(new, rows)
        write = self._store.scatter_update(tf.IndexedSlices(
            self._initializer(new, self.info.dim, self._store.dtype), rows))
        # A new row's version: this lookup's step (a freed row still
        # holds its last key's).
        now = self._step.read_value() if step is None else step
        born = self._versions.scatter_update(tf.IndexedSlices(
            tf.fill(tf.shape(rows), now), rows))
        status = tf.where(tf.reduce_all(fits), tf.constant(0, tf.int64),
                          tf.constant(self.info.shard + 1, tf.int64))
        with tf.control_dependencies([insert, write, count, allocate, born]):
            index = self._lookup_index(keys)
        held = index >= 0
        done = []
        if step is not None:
            touched = tf.boolean_mask(index, held)
            done.append(self._versions.scatter_update(tf.IndexedSlices(
                tf.fill(tf.shape(touched), step), touched)))
        rows = tf.gather(self._store, tf.where(
            held, index, tf.constant(self.capacity, tf.int64)))
        with tf.control_dependencies(done):
            rows = tf.where(held[:, None], rows, tf.zeros_like(rows))
        return rows, status

    def lookup(self, ids: Any, name: Optional[str] = None,
               exact_names: bool = False,
               training: Optional[bool] = None) -> tf.Tensor:
        """Rows of ``ids`` (any shape), looked up across ranks; rows of
        keys never seen are created.

        Args:
            ids: see ``keys``.
            name: prefix of the collectives' names (see
                exchange.sharded_lookup).
            exact_names: see exchange.sharded_lookup.
            training: whether this is a training lookup (bumps the step
                and sets the versions of the keys read); None: when a
                GradientTape is recording. Every rank must decide alike.

        Returns:
            A tensor of shape ``ids.shape + [dim]``.

        Raises:
            TypeError: see ``keys``.
            tf.errors.InvalidArgumentError: (when run, on every rank)
                more keys than ``capacity`` on some rank; the message
                names the table and that rank (the highest one when
                several overflowed).
        """
        keys = self.keys(ids)
        if training is None:
            training = compat.tape_is_recording()
        step = tf.identity(self._step.assign_add(1)) if training else None
        out, status = sharded_lookup(
            lambda k, n: self._read_rows(k, n, step), self.info, keys,
            self._store.dtype, name=name, exact_names=exact_names,
            count_ids=True)
        # Every owner's status came back with the rows: checked after both
        # exchanges, on every rank, so no rank's step is left waiting.
        with tf.control_dependencies([out]):
            check = tf.debugging.Assert(
                tf.equal(status, 0),
                [tf.strings.join([
                    "dynamic embedding table '%s': rank " % self.info.name,
                    tf.strings.as_string(status - 1),
                    " holds its capacity of %d rows; more keys arrived "
                    "(raise the layer's capacity= argument)" %
                    self.capacity])],
                name="check_capacity")
        with tf.control_dependencies([check]):
            return tf.identity(out)
