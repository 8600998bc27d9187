"""``hb.keras.layers.ShardedEmbedding``: a Keras embedding layer whose table
is sharded across ranks (Keras 3, and tf_keras with TF_USE_LEGACY_KERAS=1).

    with hb.scope():
        ids = keras.Input((None,), dtype="int64")
        emb = hb.keras.layers.ShardedEmbedding(10_000_000, 16)(ids)
        ...
        model.compile(optimizer=keras.optimizers.Adagrad(0.1), loss=...)
    model.fit(...)

What the layer does (the table's machinery is hbcore_tf.embedding):

1. ``build`` asks ``shard_plan`` whether the ``[input_dim, output_dim]``
   table is sharded. If so it creates only this rank's rows as its one
   weight, named ``embeddings`` like ``keras.layers.Embedding``'s, with the
   initializer restricted to those rows (a Constant holding the whole table
   is sliced), tags it as the table's shard (gradient reductions and
   broadcasts leave it alone) and makes the optimizer slots Keras creates
   for it rank-local shards too. A table too small to shard is an ordinary
   replicated weight and the layer computes exactly what
   ``keras.layers.Embedding`` computes.
2. ``call`` looks ids up through ``exchange.sharded_lookup``: every rank
   runs the same exchange, so every rank must call the layer the same
   number of times per step (data-parallel training does). Dense ids of
   any shape give ``ids.shape + [output_dim]``; a RaggedTensor with
   ``combiner=None`` gives a RaggedTensor; with a combiner (``"sum"``,
   ``"mean"``, ``"sqrtn"``) the last dimension of the ids (ragged, sparse
   or dense) is a bag reduced like ``tf.nn.safe_embedding_lookup_sparse``
   (an empty bag gives zeros).
3. Saving writes the FULL table in id order under ``store["0"]``, as
   ``keras.layers.Embedding`` does, so ``.weights.h5`` and ``.keras`` files
   move freely between sharded and plain models and world sizes. Saving
   assembles the table with an allgather: it is collective (every rank
   calls ``save_weights`` / ``save``), and rank 0 alone writes the file,
   whether or not the model was built inside ``hb.scope()``
   (``make_saving_collective`` in hbcore_tf.keras.model_saving). Loading reads
   only this rank's rows.
4. ``export_plain_model`` turns a trained model into a plain one (whole
   tables, plain gathers) for ``model.export`` / ``tf.saved_model.save``.

The class is named ``Embedding`` (registered as
``hbcore_tf>ShardedEmbedding``): Keras files address a layer's weights by
its class name, so this is what makes weight files of sharded and plain
models interchangeable. See docs/embedding.md, section "Keras".
"""
import contextlib
import weakref
from typing import Any, Dict, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.rank_local import whole_value
from hbcore_tf.embedding.exchange import sharded_lookup
from hbcore_tf.embedding.sharding import (creating_shards,
                                          install_table_patches,
                                          local_initializer, shard_plan)
from hbcore_tf.embedding.table import make_keras_shard
from hbcore_tf.keras import (dense_features, dynamic_embedding,
                             served_dynamic_embedding)
from hbcore_tf.keras.id_lookups import IdLookupCalls, check_combiner
from hbcore_tf.keras.model_saving import make_saving_collective

_CLASSES: Dict[bool, type] = {}


def _make_class(legacy: bool) -> type:
    # The class subclasses the Layer of the Keras asked for; only that one
    # is imported (tf_keras is optional).
    keras, register = _compat.keras_flavour(legacy)
    class ShardedEmbedding(IdLookupCalls, keras.layers.Layer):
        """Embedding layer whose ``[input_dim, output_dim]`` table is split
        row-wise over the ranks (each rank holds about 1/N of it).

        Args:
            input_dim: rows of the table (ids are in [0, input_dim)).
            output_dim: the embedding dimension.
            embeddings_initializer: initializer of the table (a Constant
                holding the whole table is sliced to this rank's rows).
            embeddings_regularizer: regularizer of the table (applied to
                this rank's rows, which sums to the whole table's).
            embeddings_constraint: constraint applied after each update to
                this rank's rows (use row-wise constraints).
            mask_zero: as keras.layers.Embedding (dense ids, no combiner).
            combiner: None, or "sum" / "mean" / "sqrtn" to reduce the last
                dimension of the ids (multi-hot bags).
            name: layer name.
            **kwargs: other Keras layer arguments.

        Raises:
            ValueError: an unknown combiner, a non-positive dimension, or
                an ``ev_option`` (DeepRec's, for dynamic tables only).
        """

        _HB_KIND = "ShardedEmbedding"

        def __init__(self, input_dim: int, output_dim: int,
                     embeddings_initializer: Any = "uniform",
                     embeddings_regularizer: Any = None,
                     embeddings_constraint: Any = None,
                     mask_zero: bool = False, combiner: Optional[str] = None,
                     name: Optional[str] = None, **kwargs: Any) -> None:
            kwargs.pop("input_length", None)  # tf_keras Embedding's config
            # DeepRec's admission/eviction options need a dynamic table.
            ev_option = kwargs.pop("ev_option", None)
            super().__init__(name=name, **kwargs)
            check_combiner(self._HB_KIND, combiner)
            if ev_option is not None:
                raise ValueError(
                    "ShardedEmbedding %r: ev_option (admission, eviction) "
                    "needs a dynamic table; a fixed table holds every row "
                    "from the start: use hb.keras.layers.DynamicEmbedding"
                    % self.name)
            if int(input_dim) <= 0 or int(output_dim) <= 0:
                raise ValueError(
                    "ShardedEmbedding: input_dim and output_dim must be "
                    "positive, got %r and %r" % (input_dim, output_dim))
            self.input_dim = int(input_dim)
            self.output_dim = int(output_dim)
            self.embeddings_initializer = keras.initializers.get(
                embeddings_initializer)
            self.embeddings_regularizer = keras.regularizers.get(
                embeddings_regularizer)
            self.embeddings_constraint = keras.constraints.get(
                embeddings_constraint)
            self.mask_zero = bool(mask_zero)
            self.supports_masking = self.mask_zero
            self.combiner = combiner
            # Plain attributes, out of Keras' attribute tracking (which
            # would wrap the tuple and the mapping).
            object.__setattr__(self, "_hb_info", None)
            # Set by export_plain_model: hold the whole table, never shard.
            object.__setattr__(self, "_hb_replicated", False)
            object.__setattr__(self, "_hb_graph_calls",
                               weakref.WeakKeyDictionary())
            self._supports_ragged_inputs = True  # tf_keras: keep ragged ids

        if not legacy:
            @property
            def embeddings(self) -> Any:
                """The table's weight (this rank's rows when sharded)."""
                return self._embeddings

        @property
        def shard_info(self) -> Any:
            """This rank's ShardInfo of the table, or None when the table
            is replicated (or the layer is not built yet)."""
            return self._hb_info

        def build(self, input_shape: Any = None) -> None:
            info = None
            if not self._hb_replicated:
                info = shard_plan(self.name, (self.input_dim, self.output_dim))
            shape = (self.input_dim, self.output_dim)
            initializer = self.embeddings_initializer
            local = contextlib.nullcontext()
            if info is not None:
                shape = (info.rows, info.dim)
                initializer = local_initializer(initializer, info)
                # The moment: the first sharded Keras table is built.
                install_table_patches()
                make_saving_collective(tf_keras=legacy)
                local = creating_shards()
            with local:
                weight = self.add_weight(
                    shape=shape, initializer=initializer, name="embeddings",
                    regularizer=self.embeddings_regularizer,
                    constraint=self.embeddings_constraint, trainable=True)
            # Tracked under the attribute the flavour's Embedding uses, so
            # object-based checkpoints (tf.train.Checkpoint, tf_keras's TF
            # format) match keras.layers.Embedding's: Keras 3 keeps the
            # weight in `_embeddings` behind an `embeddings` property.
            setattr(self, "embeddings" if legacy else "_embeddings", weight)
            if info is not None:
                path = getattr(self.embeddings, "path", None) or \
                    self.embeddings.name.split(":")[0]
                info = info._replace(name=path)
                make_keras_shard(self.embeddings, info)
            object.__setattr__(self, "_hb_info", info)
            self.built = True

        # --- lookup ------------------------------------------------------------

        def _table_name(self) -> str:
            return self.shard_info.name

        def _lookup(self, ids: Any) -> tf.Tensor:
            ids = tf.convert_to_tensor(ids)
            if not ids.dtype.is_integer:
                ids = tf.cast(ids, tf.int64)
            if self.shard_info is None:
                if legacy:
                    out = tf.nn.embedding_lookup(self.embeddings, ids)
                else:
                    out = keras.ops.take(self.embeddings, ids, axis=0)
            else:
                table = _compat.unwrap_variable(self.embeddings)
                out = sharded_lookup(lambda local: tf.gather(table, local),
                                     self.shard_info, ids, table.dtype,
                                     name=self._collective_name(),
                                     exact_names=True)
            if out.dtype != self.compute_dtype:
                out = tf.cast(out, self.compute_dtype)
            return out

        def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
            if not self.mask_zero or self.combiner is not None:
                return None
            if isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor)):
                return None
            return tf.not_equal(inputs, 0)

        # --- state ---------------------------------------------------------------

        def full_table(self) -> np.ndarray:
            """The whole ``[input_dim, output_dim]`` table in id order.

            Collective when the table is sharded: every rank calls it (the
            rows are allgathered); each rank gets the whole table.

            Returns:
                A numpy array.
            """
            return whole_value(self.embeddings)

        def save_own_variables(self, store: Any) -> None:
            """Writes the whole table as ``store["0"]`` (collective when
            sharded, see full_table)."""
            if self.shard_info is None:
                return super().save_own_variables(store)
            store["0"] = self.full_table()

        def load_own_variables(self, store: Any) -> None:
            """Reads the whole table from ``store["0"]`` and keeps this
            rank's rows.

            Raises:
                ValueError: the store holds no table or one of another
                    shape.
            """
            if self.shard_info is None:
                return super().load_own_variables(store)
            keys = list(store.keys())
            if keys != ["0"]:
                raise ValueError(
                    "Layer '%s' expected 1 variable (the embeddings table), "
                    "but received %d variables during loading" % (
                        self.name, len(keys)))
            value = store["0"]
            expected = (self.input_dim, self.output_dim)
            if tuple(value.shape) != expected:
                raise ValueError(
                    "Layer '%s': the saved table has shape %s, expected %s"
                    % (self.name, tuple(value.shape), expected))
            info = self.shard_info
            self.embeddings.assign(
                np.asarray(value[info.offset:info.offset + info.rows]))

        def get_config(self) -> Dict[str, Any]:
            config = super().get_config()
            config.update({
                "input_dim": self.input_dim,
                "output_dim": self.output_dim,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer),
                "embeddings_regularizer": keras.regularizers.serialize(
                    self.embeddings_regularizer),
                "embeddings_constraint": keras.constraints.serialize(
                    self.embeddings_constraint),
                "mask_zero": self.mask_zero,
                "combiner": self.combiner,
            })
            return config

    # Keras files address a layer's weights by its class name (snake case,
    # numbered per name: "layers/embedding_1/vars/0"), not by the layer's
    # name. Named "Embedding", a ShardedEmbedding is stored exactly where
    # the keras.layers.Embedding of the same model would be, so weight
    # files move between sharded and plain models; automatic layer names
    # follow too. It is registered, and serialized, as
    # "hbcore_tf>ShardedEmbedding".
    ShardedEmbedding.__name__ = "Embedding"
    return register(package="hbcore_tf", name="ShardedEmbedding")(
        ShardedEmbedding)


def layer_class(legacy: Optional[bool] = None) -> type:
    """Returns ShardedEmbedding for Keras 3 or tf_keras (built and
    registered for serialization once per process).

    Args:
        legacy: True for tf_keras, False for Keras 3; None follows
            TF_USE_LEGACY_KERAS.

    Returns:
        The layer class.
    """
    return _compat.class_per_keras(_CLASSES, _make_class, legacy)


def _is_sharded_layer(layer: Any) -> bool:
    return any(type(layer) is cls for cls in _CLASSES.values()) and \
        getattr(layer, "shard_info", None) is not None


def _holds_rank_rows(layer: Any) -> bool:
    """Whether ``layer`` holds only this rank's rows of its table."""
    return _is_sharded_layer(layer) or dynamic_embedding.is_dynamic_layer(layer)


def export_plain_model(model: Any) -> Any:
    """A copy of a trained Functional or Sequential model in which every
    sharded ShardedEmbedding holds its whole table on this rank and looks
    ids up with a plain gather: ``model.export(dir)`` (Keras 3) or
    ``tf.saved_model.save(model, dir)`` of the copy writes a SavedModel
    that serves with stock TensorFlow (no hbcore ops, no MPI).

    A DynamicEmbedding becomes a ``ServedDynamicEmbedding`` holding every
    rank's keys and rows (hbcore_tf.keras.served_dynamic_embedding): ids
    it holds read their trained rows, other ids what the trained layer
    gives a key it has no row for (the key's initial row; 0 with a
    CounterFilter).

    A ShardedEmbedding without a combiner becomes a
    ``keras.layers.Embedding``; one with a combiner, and one that was left
    replicated when it was built, becomes a ShardedEmbedding that never
    shards (the SavedModel's graph is plain TF either way), whatever the
    sharding options in force when ``export_plain_model`` runs. Collective: every rank calls it (the tables are
    allgathered), and each rank gets the same model; let rank 0 write it.

    Args:
        model: a built Functional or Sequential Keras model (layers nested
            in sub-models are copied by config, so keep ShardedEmbedding
            layers at the top level).

    Returns:
        The plain model (not compiled).

    Raises:
        ValueError: a sub-model holds a sharded ShardedEmbedding or a
            DynamicEmbedding.
    """
    keras = _compat.keras_module()
    cls = layer_class()
    top = list(model.layers)
    for layer in top:
        if layer is not model and hasattr(layer, "layers") and any(
                _holds_rank_rows(inner) for inner in layer._flatten_layers()):
            raise ValueError(
                "export_plain_model: sub-model %r holds a sharded "
                "ShardedEmbedding or a DynamicEmbedding; keep them at the "
                "top level" % layer.name)
    # Collective, in the model's layer order (the same on every rank).
    tables = {}
    for layer in top:
        if _is_sharded_layer(layer):
            tables[id(layer)] = [layer.full_table()]
        elif dynamic_embedding.is_dynamic_layer(layer):
            whole = dynamic_embedding.whole_table(layer.table)
            tables[id(layer)] = [whole["keys"], whole["values"]]

    def clone(layer: Any) -> Any:
        if id(layer) not in tables:
            twin = layer.__class__.from_config(layer.get_config())
            if type(layer) in _CLASSES.values():
                # A ShardedEmbedding left replicated when it was built
                # (too few rows for the options then in force) holds its
                # whole table: its copy must not shard under the options
                # in force now.
                object.__setattr__(twin, "_hb_replicated", True)
            return twin
        config = layer.get_config()
        if dynamic_embedding.is_dynamic_layer(layer):
            return served_dynamic_embedding.layer_class().from_config(
                dynamic_embedding.served_config(
                    config, len(tables[id(layer)][0])))
        if config["combiner"] is None:
            return keras.layers.Embedding(
                config["input_dim"], config["output_dim"],
                mask_zero=config["mask_zero"], name=config["name"],
                dtype=config.get("dtype"))
        plain = cls.from_config(config)
        object.__setattr__(plain, "_hb_replicated", True)
        return plain

    plain = keras.models.clone_model(model, clone_function=clone)
    for source, target in zip(top, plain.layers):
        if id(source) in tables:
            target.set_weights(tables[id(source)])
        else:
            target.set_weights(source.get_weights())
    return plain


# Declared, not bound: the module's __getattr__ below builds the class on
# first use (an annotation alone makes no attribute, so lookups reach it).
ShardedEmbedding: type


DenseFeatures: type
DynamicEmbedding: type


def __getattr__(name: str) -> Any:
    # ShardedEmbedding and DynamicEmbedding are built on first use, for the
    # Keras in use; DenseFeatures (hbcore_tf.keras.dense_features) for
    # tf_keras, the Keras that has feature columns.
    if name == "ShardedEmbedding":
        return layer_class()
    if name == "DynamicEmbedding":
        return dynamic_embedding.layer_class()
    if name == "DenseFeatures":
        return dense_features.layer_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["DenseFeatures", "DynamicEmbedding", "ShardedEmbedding",
           "export_plain_model", "layer_class"]
