"""DeepRec's EmbeddingVariable over hbcore's dynamic table, for
tf.compat.v1 graphs (``hb.get_embedding_variable``, and the tables of
feature columns under ``emb_backend='PAIEV'``, hbcore_tf.embedding.paiev).

    with tf.Graph().as_default():
        ev = hb.get_embedding_variable("user_emb", embedding_dim=16)
        rows = tf.nn.embedding_lookup(ev, user_ids)   # any int64 ids

The variable returned is the table's store (hbcore_tf.embedding.
dynamic_table: this rank's ``[capacity + 1, dim]`` rows, rank-local,
made with ``tf.compat.v1.get_variable`` under the variable's name). Its
class is swapped in place for a subclass whose ``sparse_read`` is the
table's lookup, so everything TensorFlow reads a resource variable's rows
with (``tf.nn.embedding_lookup``, ``embedding_lookup_sparse``,
``safe_embedding_lookup_sparse``, ``tf.gather``) looks ids up across the
ranks and creates the rows of new ids; gradients reach the store's rows
as IndexedSlices, and tf.compat.v1 optimizers make slots of the same
rows (rank-local, hbcore_tf.embedding.sharding's slot patch).

Training lookups (dynamic_table.py, "Versions and eviction"): a graph
has no recording GradientTape, so every lookup of a trainable embedding
variable is a training lookup: each run of it bumps the table's step by
one and sets the versions of the keys it reads (with one lookup per
training step, as usual, the step is the number of steps run since the
table was created or restored). A lookup of a variable made with
``trainable=False`` is not. Eviction options evict when a Saver saves the
table (checkpoint_savers.py), on every rank.

Invariant: the table's own reads of its store (the owner's gather, and
eviction's reads of the rows) go to
the resource variable's plain ``sparse_read``: ``EmbeddingVariableTable``
marks the owner's stage, and the store's ``sparse_read`` reads plainly
while it is marked (graph construction is one thread per graph, the mark
is per thread).
"""
import contextlib
import math
import threading
from typing import Any, Iterator, Optional, Tuple

import tensorflow as tf

from hbcore_tf._base.compat import GraphModeRequired
from hbcore_tf._base.rank_local import tag
from hbcore_tf._patches import internals
from hbcore_tf.embedding import dynamic_checkpoint
from hbcore_tf.embedding.dynamic_init import KeyInitializer, uniforms
from hbcore_tf.embedding.dynamic_table import DynamicTable
from hbcore_tf.embedding.ev_option import admission_threshold, eviction
from hbcore_tf.embedding.sharding import (creating_shards,
                                          install_table_patches)
from hbcore_tf.embedding.table import variable_subclass

DEFAULT_CAPACITY = 65536
# DeepRec's key dtypes (int32 ids are looked up as int64 keys).
KEY_DTYPES = (tf.int64, tf.int32)
# Candidates per value of the truncated normal (first one within 2
# stddev wins; all 8 outside has probability 0.0455 ** 8 ~ 2e-11, and
# then the last is clipped to the bound).
_TRUNCATED_TRIES = 8

_owner = threading.local()  # .depth: inside the owner's stage
_classes: dict = {}


@contextlib.contextmanager
def _owner_stage() -> Iterator[None]:
    _owner.depth = getattr(_owner, "depth", 0) + 1
    try:
        yield
    finally:
        _owner.depth -= 1


class EmbeddingVariableTable(DynamicTable):
    """A DynamicTable whose store is also the lookup variable users hold:
    its owner's stage and its eviction read the store plainly (module
    docstring)."""

    def _read_rows(self, keys: tf.Tensor, occurrences: tf.Tensor,
                   step: Optional[tf.Tensor] = None
                   ) -> Tuple[tf.Tensor, tf.Tensor]:
        with _owner_stage():
            return super()._read_rows(keys, occurrences, step)

    def evict(self) -> tf.Tensor:
        with _owner_stage():
            return super().evict()


@contextlib.contextmanager
def _unpartitioned() -> Iterator[None]:
    """The current variable scope without its partitioner: the store is
    one variable per rank (rows are sharded by key hash), as DeepRec's
    EmbeddingVariable ignores a scope's partitioner for its own shards.
    The scope re-entered is a copy, so the caller's keeps its
    partitioner."""
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                     auxiliary_name_scope=False) as scope:
        scope.set_partitioner(None)
        yield


def _lookup_class(base: type) -> type:
    """The subclass of a resource-variable class whose ``sparse_read`` is
    the dynamic table's lookup (outside the owner's stage)."""
    if base not in _classes:
        def sparse_read(self, indices, name=None):
            if getattr(_owner, "depth", 0) > 0:
                return base.sparse_read(self, indices, name=name)
            # Graphs have no recording tape: a lookup of a trainable
            # variable is a training lookup (module docstring).
            return self._hb_ev_table.lookup(indices, name=name,
                                            training=bool(self.trainable))

        _classes[base] = variable_subclass(base, dict(
            sparse_read=sparse_read, _hb_embedding_variable=True))
    return _classes[base]


class _TruncatedNormalRows:
    """Per-key rows of TF's truncated normal (values within 2 stddev of
    the mean): ``mean + stddev * z`` with z the first of 8 Box-Muller
    normals (hbcore_tf.embedding.dynamic_init's uniforms of the key) whose
    magnitude is at most 2."""

    def __init__(self, mean: float, stddev: float, seed: int) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, keys: tf.Tensor, dim: int,
                 dtype: tf.DType) -> tf.Tensor:
        tries = _TRUNCATED_TRIES
        u = tf.reshape(uniforms(keys, self.seed, 2 * tries * dim),
                       [-1, 2, tries, dim])
        z = (tf.sqrt(-2.0 * tf.math.log1p(-u[:, 0]))
             * tf.cos(2.0 * math.pi * u[:, 1]))          # [n, tries, dim]
        inside = tf.abs(z) <= 2.0
        first = tf.argmax(tf.cast(inside, tf.int32), axis=1)  # 0 if none
        picked = tf.gather(tf.transpose(z, [0, 2, 1]), first[..., None],
                           batch_dims=2)[..., 0]
        picked = tf.clip_by_value(picked, -2.0, 2.0)
        return tf.cast(self.mean + self.stddev * picked, dtype)


def key_initializer(initializer: Any, table: str) -> Any:
    """The per-key initializer of a table requested with ``initializer``
    (TensorFlow's v1 or v2 initializers, or Keras'; None is DeepRec's and
    TF's default for embeddings, a truncated normal of stddev 1)."""
    if initializer is None:
        return _TruncatedNormalRows(0.0, 1.0, 0)
    if isinstance(initializer, type):
        initializer = initializer()
    kind = type(initializer).__name__
    if kind == "TruncatedNormal":
        config = initializer.get_config()
        seed = config.get("seed")
        return _TruncatedNormalRows(
            float(config.get("mean", 0.0)),
            float(config.get("stddev", 1.0)),
            int(seed) if isinstance(seed, int) else 0)
    if not hasattr(initializer, "get_config"):
        raise ValueError(
            "dynamic embedding table %r: initializer %r has no per-key "
            "form (rows are created per id on its owner); use a "
            "TensorFlow or Keras initializer object: zeros, ones, a "
            "scalar constant, random uniform, random normal or truncated "
            "normal" % (table, initializer))
    return KeyInitializer(initializer, table)


def embedding_variable(name: str, embedding_dim: int,
                       key_dtype: Any = tf.int64, value_dtype: Any = None,
                       initializer: Any = None, trainable: bool = True,
                       collections: Any = None, ev_option: Any = None,
                       capacity: int = DEFAULT_CAPACITY,
                       getter: Optional[Any] = None) -> Any:
    """Creates a dynamic table and returns its store as the variable that
    lookups read (module docstring). Every rank must create it, with the
    same arguments, at the same point of its graph.

    Args:
        name: the variable's name (in the current variable scope).
        embedding_dim: the row width, > 0.
        key_dtype: tf.int64 or tf.int32.
        value_dtype: the rows' floating dtype (None: float32).
        initializer: see ``key_initializer``.
        trainable: added to TRAINABLE_VARIABLES.
        collections: the variable's collections (None: GLOBAL_VARIABLES).
        ev_option: DeepRec's ``EmbeddingVariableOption`` (its counter
            filter admits keys, its eviction evicts at every save;
            hbcore_tf.embedding.ev_option).
        capacity: rows each rank can hold (a lookup that needs more fails
            naming the table).
        getter: the ``get_variable`` to create the store with (a custom
            getter's next getter); None: tf.compat.v1.get_variable.

    Returns:
        The store, a resource variable whose reads are lookups.

    Raises:
        GraphModeRequired: called eagerly (a tf.compat.v1 graph API).
        ValueError: a non-positive ``embedding_dim`` or ``capacity``, an
            initializer with no per-key form, an unsupported key dtype;
            each names the table.
        TypeError, ValueError, NotImplementedError: a bad or
            unsupported ``ev_option`` (ev_option.admission_threshold,
            ev_option.eviction).
    """
    if tf.executing_eagerly():
        raise GraphModeRequired(
            "embedding variable %r: DeepRec's EmbeddingVariable is a "
            "tf.compat.v1 graph API; build it in a graph (for eager "
            "Keras use hb.keras.layers.DynamicEmbedding)" % name)
    if int(embedding_dim) <= 0 or int(capacity) <= 0:
        raise ValueError(
            "embedding variable %r: embedding_dim and capacity must be "
            "positive, got %r and %r" % (name, embedding_dim, capacity))
    if tf.as_dtype(key_dtype) not in KEY_DTYPES:
        raise ValueError(
            "embedding variable %r: key_dtype must be int64 or int32 (as "
            "DeepRec's), got %r" % (name, key_dtype))
    dtype = tf.as_dtype(value_dtype or tf.float32)
    if not dtype.is_floating:
        raise ValueError("embedding variable %r: value_dtype must be a "
                         "floating dtype, got %s" % (name, dtype.name))
    filter_freq = admission_threshold(ev_option, name)
    evict = eviction(ev_option, name)
    rows = key_initializer(initializer, name)
    install_table_patches()
    with creating_shards(), _unpartitioned():
        store = (getter or tf.compat.v1.get_variable)(
            name, shape=[int(capacity) + 1, int(embedding_dim)],
            dtype=dtype, initializer=tf.compat.v1.zeros_initializer(),
            trainable=trainable, collections=collections,
            use_resource=True)
    if getattr(type(store), "_hb_embedding_variable", False):
        return store  # reuse of a variable made before
    if not isinstance(store, internals.BASE_RESOURCE_VARIABLE.load()):
        raise TypeError("embedding variable %r must be a resource variable,"
                        " got %s" % (name, type(store).__name__))
    table = EmbeddingVariableTable(store.name.split(":")[0], store, "int64",
                                   rows, filter_freq, evict)
    tag(store, table.info)
    object.__setattr__(store, "__class__", _lookup_class(type(store)))
    object.__setattr__(store, "_hb_ev_table", table)
    # Checkpoints by key (dynamic_checkpoint.py; a tf.compat.v1 Saver:
    # dynamic_saver.py), its slots too (sharding's slot patch).
    dynamic_checkpoint.attach(store, table, store=True)
    return store


def table_of(variable: Any) -> Optional[DynamicTable]:
    """The dynamic table of an embedding variable (None for any other
    object)."""
    return getattr(variable, "_hb_ev_table", None)
