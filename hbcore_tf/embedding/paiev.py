"""HybridBackend's ``PAIEV`` embedding backend: feature-column tables as
DeepRec EmbeddingVariables, here hbcore's dynamic tables
(hbcore_tf.embedding.embedding_variable).

    with hb.scope(emb_backend="PAIEV"):
        col = tf.feature_column.embedding_column(
            hb.feature_column.raw_categorical_column("user"), 16)
        user_emb = hb.keras.layers.DenseFeatures([col])(features)

Which columns: an embedding column over DeepRec's
``categorical_column_with_embedding`` (hbcore_tf.embedding.ev_column)
always has a dynamic table; under ``emb_backend='PAIEV'`` the table of an embedding
column is dynamic when ``paiev_enabled`` is True for it (the default, as
in HybridBackend), and always when its categorical column has at least
``emb_num_buckets_max`` buckets or ``sys.maxsize`` of them
(``raw_categorical_column``: HybridBackend logs that PAIEV cannot be
turned off for it and keeps it on). Other columns keep hbcore's fixed
sharded tables.

How: ``dynamic_tables(column)`` wraps the building of one column with a
custom getter; the column's ``embedding_weights`` request (its
``get_variable`` of ``[num_buckets, dim]``) becomes
``embedding_variable(...)`` with the column's initializer and dtype and
the column's ``paiev_*`` options; TensorFlow's own lookup code then reads
it through the variable's ``sparse_read``. Options HybridBackend passes
to DeepRec that a dynamic table has no use for (``paiev_caching_device``,
``paiev_partitioner``, ``paiev_validate_shape``) are accepted and change
nothing; those it would need to act on and cannot yet
(``paiev_regularizer``, ``paiev_custom_getter``, ``paiev_constraint``,
``paiev_init_data_source``) are a NotImplementedError naming the column
when set. ``paiev_steps_to_live`` is DeepRec's GlobalStepEvict: the
table evicts when a Saver saves it (embedding_variable.py).
"""
import contextlib
import sys
from typing import Any, Iterator, Tuple

import tensorflow as tf

from hbcore_tf._base.options import options
from hbcore_tf.embedding.embedding_variable import embedding_variable
from hbcore_tf.embedding.ev_column import is_embedding_column
from hbcore_tf.embedding.ev_option import (EmbeddingVariableOption,
                                           GlobalStepEvict)

# HybridBackend's paiev_* options that name something a dynamic table
# would have to do and does not do yet.
UNSUPPORTED = ("paiev_regularizer", "paiev_custom_getter",
               "paiev_constraint", "paiev_init_data_source")
_TABLE_NAME = "embedding_weights"


def _names(column: Any) -> Tuple[str, ...]:
    categorical = getattr(column, "categorical_column", None)
    return (column.name,) if categorical is None else (
        column.name, categorical.name)


def is_dynamic(column: Any) -> bool:
    """Whether ``column``'s table is a dynamic table (module docstring).

    Args:
        column: a feature column.

    Returns:
        True for an embedding column under ``emb_backend='PAIEV'`` that
        PAIEV takes.
    """
    categorical = getattr(column, "categorical_column", None)
    if is_embedding_column(categorical):
        return True  # DeepRec's column: always an EmbeddingVariable
    if options.emb_backend != "PAIEV" or categorical is None:
        return False
    names = _names(column)
    buckets = getattr(categorical, "num_buckets", None)
    unbounded = buckets is None or buckets >= min(
        sys.maxsize, options.for_column("emb_num_buckets_max", names))
    if options.for_column("paiev_enabled", names):
        return True
    if unbounded:
        tf.compat.v1.logging.warning(
            "Not possible to disable PAIEV for column %s with %s buckets",
            categorical.name, buckets)
    return unbounded


def _ev_option(column: Any, names: Tuple[str, ...]) -> Any:
    """The column's ev_option, with ``paiev_steps_to_live`` as DeepRec's
    GlobalStepEvict (tables evict when a Saver saves them)."""
    for name in UNSUPPORTED:
        if options.for_column(name, names) is not None:
            raise NotImplementedError(
                "feature column %r: option %s is not supported by hbcore's "
                "dynamic tables (emb_backend='PAIEV'); leave it None" % (
                    column.name, name))
    ev_option = getattr(column.categorical_column, "ev_option", None)
    if ev_option is None:
        ev_option = options.for_column("paiev_ev_option", names)
    steps = options.for_column("paiev_steps_to_live", names)
    if steps is not None:
        filter_option = getattr(ev_option, "filter_option", None)
        ev_option = EmbeddingVariableOption(
            filter_option=filter_option,
            evict_option=GlobalStepEvict(steps_to_live=steps))
    return ev_option


@contextlib.contextmanager
def dynamic_tables(column: Any) -> Iterator[None]:
    """While ``column`` is built, its table is a dynamic table when
    ``is_dynamic(column)`` (module docstring); otherwise nothing changes.

    Args:
        column: the feature column about to be built.

    Yields:
        Nothing.

    Raises:
        NotImplementedError: an unsupported paiev_* option is set for the
            column (when its table is made).
    """
    if not is_dynamic(column):
        yield
        return
    names = _names(column)

    def getter(next_getter: Any, name: str, *args: Any, **kwargs: Any
               ) -> Any:
        if name.rsplit("/", 1)[-1] != _TABLE_NAME:
            return next_getter(name, *args, **kwargs)
        shape = tf.TensorShape(kwargs.get("shape"))
        ev_option = _ev_option(column, names)
        capacity = options.for_column("paiev_capacity", names)
        # The store is requested without the scope's partitioner (the
        # table is sharded by key hash; HybridBackend's DeepRec ignores it
        # for an EmbeddingVariable's column too).
        return embedding_variable(
            name, int(shape[-1]), key_dtype=tf.int64,
            value_dtype=kwargs.get("dtype"),
            initializer=kwargs.get("initializer"),
            trainable=kwargs.get("trainable", True),
            collections=kwargs.get("collections"),
            ev_option=ev_option, capacity=capacity,
            getter=lambda n, **kw: next_getter(n, **kw))

    with tf.compat.v1.variable_scope(
            tf.compat.v1.get_variable_scope(), custom_getter=getter,
            auxiliary_name_scope=False):
        yield


def get_embedding_variable(
        name: str, embedding_dim: int, key_dtype: Any = tf.int64,
        value_dtype: Any = None, initializer: Any = None,
        regularizer: Any = None, trainable: bool = True,
        collections: Any = None, caching_device: Any = None,
        partitioner: Any = None, validate_shape: bool = True,
        custom_getter: Any = None, constraint: Any = None,
        steps_to_live: Any = None, init_data_source: Any = None,
        ev_option: Any = None) -> Any:
    """DeepRec's ``tf.get_embedding_variable``: an embedding table with no
    row count, looked up with ``tf.nn.embedding_lookup`` /
    ``embedding_lookup_sparse``, sharded over the ranks by a hash of the
    id, rows created on first lookup (hbcore_tf.embedding.
    embedding_variable). tf.compat.v1 graphs; every rank creates it.

    Args:
        name: the variable's name (in the current variable scope).
        embedding_dim: the row width.
        key_dtype: tf.int64 (default) or tf.int32.
        value_dtype: the rows' floating dtype (None: float32).
        initializer: the rows' initializer (None: truncated normal of
            stddev 1); computed per id, the same at any world size.
        regularizer: must be None (not supported).
        trainable: whether optimizers train it.
        collections: its collections (None: GLOBAL_VARIABLES).
        caching_device: accepted, unused (rows live on their owner).
        partitioner: accepted, unused (rows are sharded by id hash).
        validate_shape: accepted, unused.
        custom_getter: must be None (not supported).
        constraint: must be None (not supported).
        steps_to_live: DeepRec's global-step eviction (see ev_option).
        init_data_source: must be None (not supported).
        ev_option: ``hb.EmbeddingVariableOption``: a CounterFilter admits
            ids; a GlobalStepEvict or L2WeightEvict evicts at every save.

    Returns:
        The variable (this rank's store of the table).

    Raises:
        NotImplementedError: regularizer, custom_getter, constraint or
            init_data_source set; the message names the variable.
        ValueError, TypeError, GraphModeRequired: see
            embedding_variable.
    """
    del caching_device, partitioner, validate_shape
    unsupported = {"regularizer": regularizer,
                   "custom_getter": custom_getter, "constraint": constraint,
                   "init_data_source": init_data_source}
    for arg, value in sorted(unsupported.items()):
        if value is not None:
            raise NotImplementedError(
                "embedding variable %r: %s is not supported by hbcore's "
                "dynamic tables; leave it None" % (name, arg))
    if steps_to_live is not None:
        ev_option = EmbeddingVariableOption(
            filter_option=getattr(ev_option, "filter_option", None),
            evict_option=GlobalStepEvict(steps_to_live=steps_to_live))
    return embedding_variable(
        name, embedding_dim, key_dtype=key_dtype, value_dtype=value_dtype,
        initializer=initializer, trainable=trainable,
        collections=collections, ev_option=ev_option,
        capacity=options.for_column("paiev_capacity", name))


class EmbeddingBackendPAIEV:
    """HybridBackend's PAIEV backend object (``hb.embedding.
    EmbeddingBackendPAIEV``): what ``emb_backend='PAIEV'`` selects, for
    scripts that call it by hand. hbcore has no backend registry
    (``EmbeddingBackend.get()``); the feature-column layers use the module
    functions above directly.
    """

    NAME = "PAIEV"

    def enabled(self, column: Any) -> bool:
        """Whether ``column``'s table is dynamic (``is_dynamic``, with the
        backend taken as PAIEV)."""
        with options.scope(emb_backend="PAIEV"):
            return is_dynamic(column)

    def build(self, column: Any, name: str, shape: Any, dtype: Any = None,
              trainable: bool = True, use_resource: bool = True,
              initializer: Any = None, collections: Any = None,
              layer: Any = None) -> Any:
        """The column's table: a dynamic table of width ``shape[-1]``
        (HybridBackend's signature; use_resource and layer are unused).

        Returns:
            The embedding variable (see ``embedding_variable``).

        Raises:
            NotImplementedError: an unsupported paiev_* option is set.
        """
        del use_resource, layer
        names = _names(column)
        return embedding_variable(
            name, int(tf.TensorShape(shape)[-1]), value_dtype=dtype,
            initializer=initializer, trainable=trainable,
            collections=collections,
            ev_option=_ev_option(column, names),
            capacity=options.for_column("paiev_capacity", names))

    def lookup(self, column: Any, weight: Any, inputs: Any,
               sharded: bool = False, buffered: bool = False) -> tf.Tensor:
        """Rows of ``inputs`` (ids cast to int64) in ``weight``."""
        del column, sharded, buffered
        return tf.nn.embedding_lookup(weight, tf.cast(inputs, tf.int64))
