"""``hb.dense_features``: TensorFlow feature columns over sharded tables
(HybridBackend's ``hb.dense_features``).

    with hb.scope():
        columns = [tf.feature_column.embedding_column(
            tf.feature_column.categorical_column_with_identity("user", 100000),
            dimension=16)]
        user_emb, = hb.dense_features(features, columns)   # [batch, 16]

Nothing here looks anything up by itself. Each column is built by
TensorFlow's own tf.compat.v1 feature-column code (the code behind
``tf.compat.v1.feature_column.input_layer``), inside the sharding scope
(hbcore_tf.embedding.sharding): the ``embedding_weights`` an embedding column
creates with ``get_variable`` become sharded tables, and its
``safe_embedding_lookup_sparse`` reads them through the sharded lookup
(hbcore_tf.embedding.exchange). Each column is built inside
``lookup_column(<its names>)`` (``column_names``), so its lookups read
per-column options (``emb_unique``, ``emb_wire_dtype``) for that column.
Under ``emb_backend='PAIEV'`` (and for DeepRec's
``categorical_column_with_embedding``) a column's ``embedding_weights``
is a dynamic table instead (``paiev.dynamic_tables``, hbcore_tf.embedding.
paiev), read by the same TensorFlow lookup code.

Cross-rank contract: every rank calls ``dense_features`` with the same
columns (and feature keys) at the same point of its graph. The columns are
built in the same order on every rank (sorted by name, as input_layer
builds them, whatever order the list has), so the tables, and the two
alltoalls of each embedding column's lookup, are created identically on
every rank; which rows a rank holds depends on its rank, never which ops
exist.
"""
import contextlib
from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import tensorflow as tf

from hbcore_tf._base.compat import GraphModeRequired
from hbcore_tf._patches import internals
from hbcore_tf.embedding.column_init import feature_column_tables
from hbcore_tf.embedding.exchange import lookup_column
from hbcore_tf.embedding.paiev import dynamic_tables, is_dynamic
from hbcore_tf.embedding.sharding import sharding_variable_scope
from hbcore_tf._base.rank_local import is_sharded
from hbcore_tf._base.options import options


def column_names(column: Any) -> Tuple[str, ...]:
    """The names per-column options know a feature column by, in the
    order a per-column dict is searched.

    HybridBackend's rule: an embedding column (shared or not) goes by its
    own name (``<key>_embedding``), then by its categorical column's (the
    feature key for ``*_with_identity`` and ``*_with_hash_bucket``); any
    other column by its own name.

    Args:
        column: a feature column.

    Returns:
        The column's names for per-column option dicts.
    """
    categorical = getattr(column, "categorical_column", None)
    if categorical is None:
        return (column.name,)
    return (column.name, categorical.name)


@contextlib.contextmanager
def _shared_table_reused(column: Any) -> Iterator[None]:
    """Lets a tf.compat.v1 shared embedding column look up the sharded
    table an earlier column of its collection created.

    TF's shared column takes the table from its graph collection and
    checks that its shape is the whole table's, which a shard's is not.
    Inside, the collection is empty and the column's ``get_variable`` of
    ``embedding_weights`` returns that table, so TF's own lookup code runs
    on it; on exit the collection holds the table alone again. Any other
    column passes through unchanged.

    Args:
        column: the feature column about to be built.

    Yields:
        Nothing.
    """
    name = getattr(column, "shared_embedding_collection_name", None)
    graph = tf.compat.v1.get_default_graph()
    held = graph.get_collection(name) if name else []
    if len(held) != 1 or not is_sharded(held[0]):
        yield
        return
    table = held[0]

    def reuse(getter: Any, *args: Any, **kwargs: Any) -> Any:
        # TF passes the name by keyword; a getter may also get it first.
        var_name = kwargs["name"] if "name" in kwargs else args[0]
        if var_name.rsplit("/", 1)[-1] == "embedding_weights":
            return table
        return getter(*args, **kwargs)

    collection = graph.get_collection_ref(name)
    del collection[:]
    try:
        with tf.compat.v1.variable_scope(
                tf.compat.v1.get_variable_scope(), custom_getter=reuse,
                auxiliary_name_scope=False):
            yield
    finally:
        collection[:] = [table]


def check_column(column: Any) -> None:
    """Refuses a feature column whose table hbcore cannot shard.

    Args:
        column: a feature column given to hb.dense_features or
            hb.keras.layers.DenseFeatures.

    Raises:
        ValueError: a ``tf.feature_column.shared_embeddings`` column (its
            table is made by a SharedEmbeddingColumnCreator outside
            ``get_variable``), an embedding column over a sequence
            categorical column (its output is a sequence, not one row per
            example) or over one with at least ``emb_num_buckets_max``
            buckets (HybridBackend's rule: ``raw_categorical_column``'s
            unchecked ids) unless its table is dynamic (PAIEV); the
            message names the column and what was wrong.
    """
    name = getattr(column, "name", repr(column))
    if isinstance(column, internals.FC_V2_SHARED_EMBEDDING_COLUMN.load()):
        raise ValueError(
            "feature column %r (a tf.feature_column.shared_embeddings "
            "column) cannot be sharded: its table is made by TF's "
            "SharedEmbeddingColumnCreator, not by get_variable; use "
            "tf.compat.v1.feature_column.shared_embedding_columns, as "
            "HybridBackend asks" % name)
    categorical = getattr(column, "categorical_column", None)
    buckets = getattr(categorical, "num_buckets", None)
    limit = options.for_column("emb_num_buckets_max", column_names(column))
    if buckets is not None and buckets >= limit and not is_dynamic(column):
        raise ValueError(
            "feature column %r cannot be sharded: num_buckets of "
            "categorical_column %s must be set explicitly (it has %d, "
            "emb_num_buckets_max is %d); a table of unchecked ids "
            "(hb.feature_column.raw_categorical_column) is a dynamic "
            "table: build it in hb.scope(emb_backend='PAIEV')" % (
                name, categorical.name, buckets, limit))
    if isinstance(categorical, (
            internals.FC_V2_SEQUENCE_CATEGORICAL.load(),
            internals.FC_V1_SEQUENCE_CATEGORICAL.load())):
        raise ValueError(
            "feature column %r cannot be sharded: its categorical column "
            "%r is a sequence column (one row per step, not per example); "
            "use a non-sequence categorical_column_with_* in "
            "hb.dense_features / DenseFeatures" % (name, categorical.name))


def _feature_keys(column: Any) -> List[str]:
    """The feature keys a column reads (its parse spec's keys)."""
    spec = getattr(column, "parse_example_spec", None)
    if spec is None:
        spec = column._parse_example_spec  # noqa: v1 columns
    return sorted(spec)


def _segmented(value: Any, segment_rank: int, column: str) -> Any:
    """``value`` (a feature of rank > segment_rank) as a rank-2 feature
    whose rows are its first ``segment_rank + 1`` dimensions, flattened
    in row-major order (HybridBackend's segments)."""
    if isinstance(value, tf.compat.v1.SparseTensorValue):
        value = tf.SparseTensor.from_value(value)
    sparse = isinstance(value, tf.SparseTensor)
    value = value if sparse else tf.convert_to_tensor(value)
    rank = (value.dense_shape.shape[0] if sparse else value.shape.rank)
    if rank is None or int(rank) <= segment_rank:
        raise ValueError(
            "emb_segment_rank=%d for column %r: its ids must have rank > "
            "%d (segments are the first %d dimensions), got rank %s" % (
                segment_rank, column, segment_rank, segment_rank + 1, rank))
    shape = (value.dense_shape if sparse
             else tf.shape(value, out_type=tf.int64))
    width = tf.reduce_prod(shape[segment_rank + 1:])
    if sparse:
        return tf.sparse.reshape(value, tf.stack([-1, width]))
    return tf.reshape(value, tf.stack([-1, width]))


def _column_features(features: Mapping, column: Any) -> Mapping:
    """``features`` as ``column`` sees them: with ``emb_segment_rank`` k >
    0 for the column, the features it reads are reshaped so that its
    output has one row per segment of the first k + 1 dimensions (an
    empty segment gives zeros, as an empty example does)."""
    names = column_names(column)
    key = names[-1]
    segment_rank = int(options.for_column("emb_segment_rank", names))
    if segment_rank == 0 or getattr(column, "categorical_column",
                                    None) is None:
        return features
    seen = dict(features)
    for feature in _feature_keys(column.categorical_column):
        if feature in seen:
            seen[feature] = _segmented(seen[feature], segment_rank, key)
    return seen


def build_columns(features: Mapping, columns: Sequence[Any],
                  outputs: Dict[Any, tf.Tensor]) -> None:
    """Builds ``columns`` in the current variable scope, tables sharded,
    and fills ``outputs`` with each column's ``[rows, width]`` tensor.

    Each column is built by TF's own tf.compat.v1 feature-column code
    (``_internal_input_layer``), one at a time, in name order (the same
    tables and collectives in the same order on every rank), inside
    ``lookup_column(<its names>)`` (per-column lookup options) and
    ``feature_column_tables()`` (HybridBackend's initializer convention).

    Args:
        features: mapping from feature key to Tensor / SparseTensor.
        columns: normalized dense columns (distinct names).
        outputs: filled with ``{column: tensor}``.

    Raises:
        ValueError: a column hbcore cannot shard (``check_column``), or a
            bad ``emb_segment_rank`` for a column's ids.
    """
    for column in columns:
        check_column(column)
    with options.scope(sharding=True), sharding_variable_scope(), \
            feature_column_tables():
        for column in sorted(columns, key=lambda c: c.name):
            seen = _column_features(features, column)
            # dynamic_tables before _shared_table_reused: a shared
            # column's reuse getter runs first and returns the table.
            with lookup_column(column_names(column)), \
                    dynamic_tables(column), _shared_table_reused(column):
                # One column at a time, in this variable scope
                # (from_template: no scope of its own), with TF's own
                # per-column variable scope, lookup and reshape to
                # [rows, width]; it checks that the column is dense.
                internals.FC_V1_INTERNAL_INPUT_LAYER.load()(
                    seen, [column],
                    scope=tf.compat.v1.get_variable_scope(),
                    from_template=True, cols_to_output_tensors=outputs)


def check_graph_mode(caller: str) -> None:
    """Raises unless a tf.compat.v1 graph is being built (feature-column
    tables are made by get_variable, which neither eager execution nor
    tf.function keeps from one call to the next).

    Raises:
        GraphModeRequired: called eagerly (``hb.function`` then builds the
            call in the default graph, as HybridBackend did).
        RuntimeError: called inside a tf.function.
    """
    message = ("%s builds tf.compat.v1 feature columns, whose tables are "
               "made with get_variable: call it while building a "
               "tf.compat.v1 graph (as HybridBackend's examples do, or "
               "inside an hb.function), not eagerly or inside a tf.function"
               % caller)
    if tf.executing_eagerly():
        raise GraphModeRequired(message)
    if tf.compat.v1.get_default_graph().building_function:
        raise RuntimeError(message)


def normalize_columns(feature_columns: Sequence[Any]) -> List[Any]:
    """TF's checks of a column list: non-empty, distinct names (a single
    column is taken as a list of one).

    Raises:
        ValueError: empty, or a name twice.
    """
    return list(internals.FC_V1_NORMALIZE.load()(feature_columns))


def dense_features(features: Mapping,
                   feature_columns: Sequence[Any]) -> List[tf.Tensor]:
    """Dense tensors of ``feature_columns``, embedding tables sharded
    across ranks (HybridBackend's ``hb.dense_features``).

    The tables of embedding columns (``embedding_column``, tf.compat.v1
    ``shared_embedding_columns``) are created as sharded tables (a table
    with fewer than ``max(world size, emb_min_rows_to_shard)`` rows stays
    replicated) under ``dense_features[_N]/<column>_embedding/
    embedding_weights`` and looked up across ranks; other dense columns
    (numeric, indicator, ...) are computed locally. Tables are sharded
    whatever the ``sharding`` option says (HybridBackend shards them
    whenever there are several ranks), except while building a serving
    graph for export. Each output equals what
    ``tf.compat.v1.feature_column.input_layer`` computes for that column
    on one unsharded table with the same values. Per-column options:
    ``emb_unique``, ``emb_wire_dtype`` (the lookup) and
    ``emb_segment_rank`` (k > 0: one output row per segment of the ids'
    first k + 1 dimensions). An initializer that is a plain function is
    called as HybridBackend calls it (hbcore_tf.embedding.column_init).

    Each call creates new tables (as each call of input_layer, or each
    new DenseFeatures layer, does). Works in tf.compat.v1 graphs, the mode
    of HybridBackend's examples.

    Args:
        features: a mapping from feature key to a Tensor or SparseTensor,
            as for ``input_layer``.
        feature_columns: the dense feature columns (v1 or v2 columns that
            ``input_layer`` accepts), distinct names.

    Returns:
        One ``[batch, width]`` tensor per column, in the order of
        ``feature_columns`` (HybridBackend's ``dense_features`` returns
        the list; ``tf.concat(outputs, 1)`` is its concatenation in that
        order).

    Raises:
        ValueError: ``features`` is not a mapping; ``feature_columns`` is
            empty, holds a column twice (by name), holds a column that is
            not dense (a categorical column not wrapped by
            ``embedding_column`` / ``indicator_column``) or one hbcore
            cannot shard (``check_column``).
        RuntimeError: called eagerly or inside a tf.function.
    """
    check_graph_mode("hb.dense_features")
    if not isinstance(features, Mapping):
        raise ValueError("hb.dense_features expects a mapping from feature "
                         "key to tensor as features, got %s" %
                         type(features).__name__)
    columns = normalize_columns(feature_columns)
    outputs: Dict[Any, tf.Tensor] = {}
    with tf.compat.v1.variable_scope(None, default_name="dense_features",
                                     values=list(features.values())):
        build_columns(features, columns, outputs)
    return [outputs[column] for column in columns]
