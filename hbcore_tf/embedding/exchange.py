"""The sharded lookup: input distribution, local lookup, output
distribution (TorchRec's three stages), each a small piece of its own.

Contract between the stages, for one table and one batch of ids on every
rank (all ranks run the same stages, so they issue the same two
alltoalls per lookup, forward, and the same two in the backward pass).
The integer bookkeeping of stages 1 and 2 is one C++ kernel each
(``HbcoreShardRoute`` and ``HbcoreShardReceive``, csrc/tf/shard_route.cc,
where their outputs are specified): in TF ops it was about fifteen small
kernels per table on every step's critical path.

1. ``route_ids`` (sender side): replaces out-of-range ids by 0 (they are
   reported after the exchange, see below), deduplicates the ids, groups
   the distinct ids by owner and sends each owner its ids. Each owner's
   segment ends with one extra element, the sender's step flag (1 when
   the sender has data this step, 0 when data sync gave it an empty
   batch), so every owner learns how many ranks contribute to this step's
   gradient without another collective. It keeps ``restore``: where each
   flat id's row will be among the rows that come back.
2. ``lookup_local`` (owner side): deduplicates the ids it received from all
   senders, gathers its rows once per distinct id, and in the backward pass
   scales the rows' gradient by 1 / (number of ranks with data). The
   gradient of duplicate ids (within a sender and across senders) is summed
   by the gather's own gradient, so the shard's gradient is an
   IndexedSlices with one entry per distinct id.
3. ``return_rows`` (owner -> sender): sends the rows back (in the
   ``emb_wire_dtype``), and the sender restores the original order and
   duplicates with one gather (``restore``). The alltoall's gradient sends
   the rows' gradients back to their owners.

Scaling rule: the update of a sharded row equals the one single-process
training on the global batch makes, with the same convention as the
averaged dense gradients (a rank with an empty batch does not shrink the
average). Sum over ranks of d(loss_r)/d(row), divided by the number of
ranks that had data.

Options: ``emb_unique`` and ``emb_wire_dtype`` may be per-column dicts
(hbcore_tf._base.options). A lookup reads them for the column being looked up
(``lookup_column``, set by ``hb.dense_features`` around each feature
column), with HybridBackend's rule: the column's own entry, else the
option's default; a lookup outside any column gets the default. They are
read once, when the lookup is built, so the graph holds plain values.

Bad ids: an id outside [0, num_rows) raises InvalidArgumentError naming the
table and the ids on the rank that looked it up, after that rank has taken
part in both exchanges, so the other ranks' step completes; the failing
rank's process then ends the job (hbrun stops every rank).
"""
import contextlib
import threading
from typing import Any, Callable, Iterator, NamedTuple, Optional, Tuple

import tensorflow as tf

from hbcore_tf._parallel import step_weight as _step_weight
from hbcore_tf._base.rank_local import ShardInfo
from hbcore_tf._ops.library import lib as _lib
from hbcore_tf.mpi_ops import alltoall_int64_splits
from hbcore_tf._base.options import options

# Integer bookkeeping only: nothing to differentiate.
tf.no_gradient("HbcoreShardRoute")
tf.no_gradient("HbcoreShardReceive")


_column = threading.local()  # .names: the stack of lookup_column names


@contextlib.contextmanager
def lookup_column(names: Tuple[str, ...]) -> Iterator[None]:
    """Lookups built inside belong to the feature column known by
    ``names``: they read per-column options (``emb_unique``,
    ``emb_wire_dtype``) for it.

    Per thread: the lookups of a column are built on the thread that
    builds the column.

    Args:
        names: the column's names, in the order per-column dicts are
            searched (an embedding column's own name, then its
            categorical column's; ``feature_columns.column_names``).

    Yields:
        Nothing.
    """
    stack = _column.__dict__.setdefault("names", [])
    stack.append(tuple(names))
    try:
        yield
    finally:
        stack.pop()


def current_column() -> Optional[Tuple[str, ...]]:
    """The innermost ``lookup_column`` names on this thread, or None."""
    stack = getattr(_column, "names", None)
    return stack[-1] if stack else None


def column_option(name: str) -> Any:
    """Option ``name`` for the lookup being built: its value for the
    current column (``options.for_column``)."""
    return options.for_column(name, current_column())


class RoutedIds(NamedTuple):
    """What the sender keeps of its ids for the way back, and what the
    owner learnt from the id exchange.

    Attributes:
        restore: for each flat id, the position of its row among the rows
            the owners send back.
        invalid: the ids outside [0, num_rows) (routed as id 0).
        distinct: local row indices of the ids other ranks sent here,
            deduplicated (the keys themselves for a dynamic table).
        index: for each received id, its position in ``distinct``.
        received_counts: how many ids came from each rank.
        senders_with_data: sum of the senders' step flags (float32 scalar).
        occurrences: with ``count_ids``, how many times each id of
            ``distinct`` occurs in all senders' ids (int64); else None.
    """

    restore: tf.Tensor
    invalid: tf.Tensor
    distinct: tf.Tensor
    index: tf.Tensor
    received_counts: tf.Tensor
    senders_with_data: tf.Tensor
    occurrences: Optional[tf.Tensor] = None


def _step_flag() -> tf.Tensor:
    weight = _step_weight.current()
    if weight is None:
        return tf.constant(1, tf.int64)
    return tf.cast(tf.greater(tf.reshape(weight, []), 0.0), tf.int64)


def _alltoall(tensor: tf.Tensor, splits: tf.Tensor, name: str,
              exact_names: bool) -> Any:
    """``alltoall(tensor, splits, name)`` with int64 received splits; with
    ``exact_names`` the
    collective is named ``name`` whatever the enclosing name scopes, and
    (for a float tensor) its gradient's alltoall ``name + "_grad"``."""
    if not exact_names:
        return alltoall_int64_splits(tensor, splits, name, False)
    if not tensor.dtype.is_floating:
        return alltoall_int64_splits(tensor, splits, name, True)

    @tf.custom_gradient
    def exchange(x: tf.Tensor) -> Any:
        out, received = alltoall_int64_splits(x, splits, name, True)

        def grad(upstream: Any, _splits_grad: Any = None) -> tf.Tensor:
            if upstream is None:
                upstream = tf.zeros_like(out)
            back, _ = alltoall_int64_splits(
                tf.convert_to_tensor(upstream), received, name + "_grad",
                True)
            return back
        return (out, received), grad

    return exchange(tensor)


def _is_id(values: tf.Tensor, splits: tf.Tensor) -> tf.Tensor:
    """For ``values`` laid out as segments of ``splits`` elements, each
    ending with a step flag: False at the flags, True elsewhere."""
    flags = tf.cumsum(splits) - 1
    return tf.tensor_scatter_nd_update(
        tf.ones_like(values, tf.bool), flags[:, None],
        tf.zeros_like(flags, tf.bool))


def _with_counts(send: tf.Tensor, send_splits: tf.Tensor,
                 restore: tf.Tensor) -> tf.Tensor:
    """``[len(send), 2]``: each sent id beside how many of this rank's
    ids it stands for (0 beside the step flags)."""
    distinct = tf.size(send, out_type=tf.int64) - tf.size(
        send_splits, out_type=tf.int64)
    per_id = tf.math.unsorted_segment_sum(
        tf.ones_like(restore), restore, distinct)
    counts = tf.scatter_nd(tf.where(_is_id(send, send_splits)), per_id,
                           tf.shape(send, out_type=tf.int64))
    return tf.stack([send, counts], axis=1)


def route_ids(info: ShardInfo, ids: tf.Tensor, name: str,
              exact_names: bool = False,
              count_ids: bool = False) -> RoutedIds:
    """Stages 1 and the owner's half of 2: route each distinct id to its
    owner, alltoall, and index what arrived.

    Args:
        info: the table.
        ids: flat int64 ids (ids outside [0, num_rows) are routed as id 0
            and kept in ``invalid``); for a table with a hashed partition
            (a dynamic table) any int64 keys, none invalid, and
            ``distinct`` then holds the keys themselves.
        name: prefix of the collective's name (``name + "_ids"``).
        exact_names: name the alltoall exactly, whatever the enclosing
            name scopes (see ``sharded_lookup``).
        count_ids: also count each distinct id's occurrences over all
            senders (``RoutedIds.occurrences``): the sender's count of
            each id it sends travels beside it in the same alltoall (a
            ``[n, 2]`` exchange instead of ``[n]``), and the owner sums
            them per distinct id.

    Returns:
        The RoutedIds of this lookup.
    """
    unique = bool(column_option("emb_unique"))
    hashed = bool(info.partition.hashed)
    send, send_splits, restore, invalid = _lib.hbcore_shard_route(
        ids, _step_flag(), num_rows=info.num_rows,
        num_shards=info.partition.num_shards, unique=unique,
        hash_partition=hashed)
    if count_ids:
        send = _with_counts(send, send_splits, restore)
    received, received_splits = _alltoall(send, send_splits, name + "_ids",
                                          exact_names)
    occurrences = None
    if count_ids:
        received, sent_counts = received[:, 0], received[:, 1]
    distinct, index, counts, with_data = _lib.hbcore_shard_receive(
        received, received_splits, offset=info.offset, rows=info.rows,
        unique=unique, hash_partition=hashed)
    if count_ids:
        occurrences = tf.math.unsorted_segment_sum(
            tf.boolean_mask(sent_counts,
                            _is_id(sent_counts, received_splits)), index,
            tf.size(distinct, out_type=tf.int64))
    return RoutedIds(restore, invalid, distinct, index, counts, with_data,
                     occurrences)


@tf.custom_gradient
def _scale_gradient(rows: tf.Tensor, factor: tf.Tensor) -> Any:
    def grad(upstream: tf.Tensor) -> Any:
        return upstream * tf.cast(factor, upstream.dtype), None
    return tf.identity(rows), grad


def lookup_local(read_rows: Callable[[tf.Tensor], tf.Tensor],
                 routed: RoutedIds) -> tf.Tensor:
    """Stage 2: this rank's rows for the ids it received, in order.

    Args:
        read_rows: gathers rows of this rank's shard by local row index;
            called as ``read_rows(distinct, occurrences)`` when the ids
            were counted (``route_ids``' count_ids).
        routed: what ``route_ids`` returned.

    Returns:
        One row per received id, in the order received. In the backward
        pass the rows' gradient is divided by the number of ranks that
        had data this step. When ``read_rows`` returns ``(rows,
        status)``, ``(those rows, status)``.
    """
    if routed.occurrences is None:
        rows = read_rows(routed.distinct)
    else:
        rows = read_rows(routed.distinct, routed.occurrences)
    status = None
    if isinstance(rows, tuple):
        rows, status = rows
    rows = _scale_gradient(
        rows, 1.0 / tf.maximum(routed.senders_with_data, 1.0))
    rows = tf.gather(rows, routed.index)
    return rows if status is None else (rows, status)


def _with_status_rows(rows: tf.Tensor, counts: tf.Tensor,
                      status: tf.Tensor) -> tf.Tensor:
    """Owner: ``rows`` in segments of ``counts`` rows (one per sender),
    each segment followed by one row filled with ``status``."""
    segments = tf.size(counts, out_type=tf.int64)
    segment = tf.repeat(tf.range(segments), counts)
    at = tf.range(tf.size(segment, out_type=tf.int64)) + segment
    ends = tf.cumsum(counts) + tf.range(segments)
    shape = tf.stack([tf.reduce_sum(counts) + segments,
                      tf.shape(rows, out_type=tf.int64)[1]])
    flags = tf.fill(tf.stack([segments, shape[1]]),
                    tf.cast(status, rows.dtype))
    return tf.scatter_nd(at[:, None], rows, shape) + \
        tf.scatter_nd(ends[:, None], flags, shape)


def return_rows(rows: tf.Tensor, routed: RoutedIds, dtype: tf.DType,
                name: str, exact_names: bool = False,
                status: Optional[tf.Tensor] = None) -> Any:
    """Stage 3: rows back to their senders; one row per flat id, in the
    senders' original order.

    Args:
        rows: ``lookup_local``'s rows, one per received id (sent in the
            ``emb_wire_dtype`` of the current column when floating).
        routed: what ``route_ids`` returned.
        dtype: the table's dtype, which the returned rows are cast to.
        name: prefix of the collective's name (``name + "_rows"``; its
            gradient's is ``name + "_rows_grad"`` with ``exact_names``).
        exact_names: name the alltoall exactly, whatever the enclosing
            name scopes (see ``sharded_lookup``).
        status: this owner's status, a small whole number (0: fine),
            sent to every rank as one extra row per sender segment.

    Returns:
        A ``[number of flat ids, dim]`` tensor of ``dtype``; with
        ``status``, also the largest status of all owners (int64).
    """
    wire = tf.as_dtype(column_option("emb_wire_dtype"))
    if wire != rows.dtype and rows.dtype.is_floating:
        rows = tf.cast(rows, wire)
    counts = routed.received_counts
    if status is not None:
        rows, counts = _with_status_rows(rows, counts, status), counts + 1
    back, back_splits = _alltoall(rows, counts, name + "_rows", exact_names)
    if status is not None:
        # Every owner sent this rank a segment, if only its status row.
        is_row = _is_id(back[:, 0], back_splits)
        status = tf.cast(tf.reduce_max(tf.boolean_mask(
            back[:, 0], tf.logical_not(is_row))), tf.int64)
        back = tf.boolean_mask(back, is_row)
    out = tf.gather(tf.cast(back, dtype), routed.restore)
    return out if status is None else (out, status)


def _lookup_name(info: ShardInfo, name: Optional[str]) -> str:
    base = name or ("%s_lookup" % info.name)
    return base.replace("/", "_").replace(":", "_")


def sharded_lookup(read_rows: Callable[[tf.Tensor], tf.Tensor],
                   info: ShardInfo, ids: Any, dtype: tf.DType,
                   name: Optional[str] = None,
                   exact_names: bool = False,
                   count_ids: bool = False) -> Any:
    """Rows of the whole table for ``ids`` (any shape), looked up across
    ranks.

    Args:
        read_rows: gathers rows of this rank's shard by local row index
            (the gradient flows to the shard through it); for a dynamic
            table (``info.partition.hashed``) by key.
        info: the table.
        ids: integer ids in [0, info.num_rows).
        dtype: the table's dtype.
        name: prefix of the collectives' names.
        exact_names: name the collectives ``name + "_ids"``,
            ``name + "_rows"`` and ``name + "_rows_grad"`` (inside the
            enclosing tf.function's path) whatever the name scopes around
            the lookup. Keras opens scopes named after auto-numbered
            models and layers, whose numbers differ between ranks that
            created different numbers of them before; the caller then
            keeps ``name`` unique within a graph.
        count_ids: ``read_rows`` also gets each id's occurrences in all
            ranks' ``ids`` (see ``route_ids``).

    ``read_rows`` may return ``(rows, status)``, status being an int64
    scalar (0: fine): every owner's status then travels back with the
    rows (``return_rows``), so every rank learns of a failure on any
    owner in the same exchange.

    Returns:
        A tensor of shape ``ids.shape + [dim]``; with a status from
        ``read_rows``, ``(that tensor, the largest status of all
        owners)``.

    Raises:
        TypeError: ``ids`` are not integers.
        tf.errors.InvalidArgumentError: (when run) an id outside
            [0, num_rows); the message names the table and the ids.
    """
    name = _lookup_name(info, name)
    with tf.name_scope("hb_sharded_lookup"):
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise TypeError("sharded embedding table %r: ids must be "
                            "integers, got %s" % (info.name, ids.dtype.name))
        flat = tf.reshape(tf.cast(ids, tf.int64), [-1])
        routed = route_ids(info, flat, name, exact_names, count_ids)
        rows = lookup_local(read_rows, routed)
        status = None
        if isinstance(rows, tuple):
            rows, status = rows
        out = return_rows(rows, routed, dtype, name, exact_names, status)
        if status is not None:
            out, status = out
        out = tf.reshape(out, tf.concat(
            [tf.shape(ids, out_type=tf.int64), [info.dim]], 0))
        # Checked after both exchanges, so the other ranks' step completes.
        with tf.control_dependencies([out]):
            check = tf.debugging.Assert(
                tf.equal(tf.size(routed.invalid), 0),
                ["sharded embedding table '%s' (%d rows): ids outside "
                 "[0, %d):" % (info.name, info.num_rows, info.num_rows),
                 routed.invalid],
                summarize=16, name="check_ids")
        with tf.control_dependencies([check]):
            out = tf.identity(out)
        return out if status is None else (out, status)
