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
right without knowing them:
1. Row r < size() belongs to exactly one key, for good (rows are never
   freed yet); rows are handed out in order 0, 1, 2, ...
2. A row is written by the lookup only when it is handed out (its
   initial values, from ``KeyInitializer``); after that only the
   optimizer writes it. A row handed out has therefore never had a
   gradient, and its optimizer slots still hold their initial values.
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
A key that has a row keeps it (a restored key too, whatever its count).
"""
from typing import Any, Optional, Tuple

import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf._base.rank_local import ShardInfo
from hbcore_tf.embedding.dynamic_init import KeyInitializer
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
    """

    def __init__(self, name: str, store: tf.Variable, key_dtype: str,
                 initializer: KeyInitializer, filter_freq: int = 0) -> None:
        rows, dim = store.shape.as_list()
        self.info = ShardInfo(name, HashPartition(rows - 1,
                                                  context.world_size),
                              context.rank, dim)
        self.key_dtype = check_key_dtype(key_dtype, name)
        self._store = store
        self._initializer = initializer
        self.filter_freq = int(filter_freq)
        self._map = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int64, default_value=-1,
            name="%s_keys" % name.replace("/", "_"))
        self._counts = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int64, default_value=0,
            name="%s_counts" % name.replace("/", "_"))

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
        key never looked up; restored keys: the checkpoint's count).

        Args:
            keys: int64 keys this rank owns.

        Returns:
            An int64 tensor shaped as ``keys``.
        """
        return self._counts.lookup(keys)

    def replace_keys(self, keys: tf.Tensor, rows: tf.Tensor,
                     counts: Optional[tf.Tensor] = None) -> Any:
        """Makes the map hold exactly ``keys`` -> ``rows`` (a restore:
        rows ``[0, len(keys))``, so invariant 1 holds again), and the
        counts exactly ``keys`` -> ``counts``.

        Args:
            keys: int64 keys this rank owns.
            rows: their rows, ``0 .. len(keys) - 1``.
            counts: their counts (None: 0).

        Returns:
            The op (graphs) or None (eager).
        """
        if counts is None:
            counts = tf.zeros_like(keys)
        ops = []
        for table, values in ((self._map, rows), (self._counts, counts)):
            old, _ = table.export()
            with tf.control_dependencies([table.remove(old)]):
                ops.append(table.insert(keys, values))
        return tf.group(ops)

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

    def _read_rows(self, keys: tf.Tensor, occurrences: tf.Tensor
                   ) -> Tuple[tf.Tensor, tf.Tensor]:
        """The owner's stage: rows of ``keys`` (keys this rank owns),
        counting them and creating the rows of admitted keys that have
        none; and this owner's status for every rank: rank + 1 when some
        key found no free row, else 0."""
        counts, count = self._count(keys, occurrences)
        index = self._lookup_index(keys)
        wanted = tf.logical_and(index < 0, counts >= self.filter_freq)
        new, _ = tf.unique(tf.boolean_mask(keys, wanted))
        rows = self._map.size() + tf.range(tf.size(new, out_type=tf.int64))
        fits = rows < self.capacity
        new, rows = tf.boolean_mask(new, fits), tf.boolean_mask(rows, fits)
        insert = self._map.insert(new, rows)
        write = self._store.scatter_update(tf.IndexedSlices(
            self._initializer(new, self.info.dim, self._store.dtype), rows))
        status = tf.where(tf.reduce_all(fits), tf.constant(0, tf.int64),
                          tf.constant(self.info.shard + 1, tf.int64))
        with tf.control_dependencies([insert, write, count]):
            index = self._lookup_index(keys)
        held = index >= 0
        rows = tf.gather(self._store, tf.where(
            held, index, tf.constant(self.capacity, tf.int64)))
        return tf.where(held[:, None], rows, tf.zeros_like(rows)), status

    def lookup(self, ids: Any, name: Optional[str] = None,
               exact_names: bool = False) -> tf.Tensor:
        """Rows of ``ids`` (any shape), looked up across ranks; rows of
        keys never seen are created.

        Args:
            ids: see ``keys``.
            name: prefix of the collectives' names (see
                exchange.sharded_lookup).
            exact_names: see exchange.sharded_lookup.

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
        out, status = sharded_lookup(
            self._read_rows, self.info, keys, self._store.dtype, name=name,
            exact_names=exact_names, count_ids=True)
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
