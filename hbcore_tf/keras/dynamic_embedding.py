"""``hb.keras.layers.DynamicEmbedding``: a Keras embedding layer over a
dynamic table (int64 or string ids, no row count, rows created on first
lookup), for Keras 3 and tf_keras.

    ids = keras.Input((None,), dtype="int64")
    emb = hb.keras.layers.DynamicEmbedding(16)(ids)          # any int64 ids
    tags = keras.Input((None,), dtype="string")
    bag = hb.keras.layers.DynamicEmbedding(
        16, key_dtype="string", combiner="mean")(tags)

The layer's call contract is ``ShardedEmbedding``'s (hbcore_tf.keras.
id_lookups). Its one weight, ``embeddings``, is this rank's store of
``capacity + 1`` rows (hbcore_tf.embedding.dynamic_table): rank-local, so
gradient reductions pass its gradient through, broadcasts skip it, and
the user's optimizer trains it and makes slots of the same rows.

Saving: tf.train.Checkpoint serializes the store and its slots in key
order (hbcore_tf.embedding.dynamic_checkpoint); Keras' own files
(``.weights.h5``, ``.keras``) get the whole table from
``save_own_variables`` (``whole_table``: collective) and each rank keeps
its keys in ``load_own_variables``; both save paths evict first
(DynamicTable.evict). See docs/embedding.md, "Dynamic tables", for what is
not there yet.
"""
import weakref
from typing import Any, Dict, Optional

import hbcore
import numpy as np
import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.rank_local import tag
from hbcore_tf.embedding import dynamic_checkpoint
from hbcore_tf.embedding.dynamic_init import KeyInitializer
from hbcore_tf.embedding.dynamic_table import DynamicTable, check_key_dtype
from hbcore_tf.embedding import ev_option as _ev_option
from hbcore_tf.embedding.sharding import (creating_shards,
                                          install_table_patches)
from hbcore_tf.keras.id_lookups import IdLookupCalls, check_combiner
from hbcore_tf.keras.model_saving import make_saving_collective

DEFAULT_CAPACITY = 65536
SAVED_NAMES = ("keys", "values", "freqs", "versions")

_CLASSES: Dict[bool, type] = {}


def _make_class(legacy: bool) -> type:
    # The class subclasses the Layer of the Keras asked for; only that one
    # is imported (tf_keras is optional).
    keras, register = _compat.keras_flavour(legacy)

    class DynamicEmbedding(IdLookupCalls, keras.layers.Layer):
        """Embedding layer over a dynamic table: ids are any int64 values
        (or strings), each rank holds the rows of the keys it owns
        (``mix(key) % world size``), and a row is created, on its owner,
        the first time its id is looked up, with values that depend only
        on the id (docs/embedding.md, "Dynamic tables").

        Args:
            output_dim: the embedding dimension.
            key_dtype: "int64" or "string".
            embeddings_initializer: the rows' initializer; one with a
                per-key form ("uniform" / RandomUniform, "normal" /
                RandomNormal, "zeros", "ones", a scalar Constant), its
                seed (0 when None) shared by every rank.
            combiner: None, or "sum" / "mean" / "sqrtn" to reduce the last
                dimension of the ids (multi-hot bags).
            ev_option: DeepRec's ``hb.EmbeddingVariableOption``: its
                ``filter_option=hb.CounterFilter(filter_freq)`` admits a
                key once it was looked up ``filter_freq`` times (before
                that it reads 0 and is not trained); its
                ``evict_option``, ``hb.GlobalStepEvict(steps_to_live)``
                or ``hb.L2WeightEvict(l2_weight_threshold)``, drops rows
                when the table is saved. None: every key is admitted and
                kept.
            name: layer name.
            capacity: rows each rank can hold (hbcore's extension; a
                lookup that needs more fails naming the table).
            **kwargs: other Keras layer arguments.

        Raises:
            ValueError: an unknown combiner or key dtype, an initializer
                with no per-key form, a non-positive output_dim or
                capacity, a negative filter_freq or steps_to_live.
            TypeError: an ev_option, filter_option, evict_option,
                filter_freq, steps_to_live or l2_weight_threshold of the
                wrong type.
        """

        _HB_KIND = "DynamicEmbedding"

        def __init__(self, output_dim: int, key_dtype: Any = "int64",
                     embeddings_initializer: Any = "uniform",
                     combiner: Optional[str] = None, ev_option: Any = None,
                     name: Optional[str] = None,
                     capacity: int = DEFAULT_CAPACITY,
                     **kwargs: Any) -> None:
            super().__init__(name=name, **kwargs)
            check_combiner(self._HB_KIND, combiner)
            if isinstance(ev_option, dict):  # from get_config
                ev_option = _ev_option.from_config(ev_option)
            self.filter_freq = _ev_option.admission_threshold(ev_option,
                                                              self.name)
            self.evict = _ev_option.eviction(ev_option, self.name)
            if int(output_dim) <= 0 or int(capacity) <= 0:
                raise ValueError(
                    "DynamicEmbedding %r: output_dim and capacity must be "
                    "positive, got %r and %r" % (self.name, output_dim,
                                                 capacity))
            self.output_dim = int(output_dim)
            self.capacity = int(capacity)
            self.key_dtype = check_key_dtype(key_dtype, self.name)
            self.embeddings_initializer = keras.initializers.get(
                embeddings_initializer)
            self.combiner = combiner
            # Fails now, not at the first lookup, for an initializer
            # with no per-key form.
            KeyInitializer(self.embeddings_initializer, self.name)
            # Plain attributes, out of Keras' attribute tracking.
            object.__setattr__(self, "_hb_table", None)
            object.__setattr__(self, "_hb_graph_calls",
                               weakref.WeakKeyDictionary())
            self._supports_ragged_inputs = True  # tf_keras: keep ragged ids

        @property
        def table(self) -> Optional[DynamicTable]:
            """This rank's DynamicTable (None before ``build``);
            ``table.size()`` is the number of rows it holds."""
            return self._hb_table

        def build(self, input_shape: Any = None) -> None:
            install_table_patches()  # Keras slots of the store: rank-local
            make_saving_collective(tf_keras=legacy)
            with creating_shards():
                weight = self.add_weight(
                    shape=(self.capacity + 1, self.output_dim),
                    initializer="zeros", name="embeddings", trainable=True)
            self.embeddings = weight
            path = getattr(weight, "path", None) or \
                weight.name.split(":")[0]
            table = DynamicTable(
                path, _compat.unwrap_variable(weight), self.key_dtype,
                KeyInitializer(self.embeddings_initializer, self.name),
                self.filter_freq, self.evict)
            tag(weight, table.info)
            dynamic_checkpoint.attach(weight, table, store=True)
            object.__setattr__(self, "_hb_table", table)
            self.built = True

        def _table_name(self) -> str:
            return self._hb_table.info.name

        def _lookup(self, ids: Any) -> tf.Tensor:
            out = self._hb_table.lookup(ids, name=self._collective_name(),
                                        exact_names=True)
            if out.dtype != self.compute_dtype:
                out = tf.cast(out, self.compute_dtype)
            return out

        def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
            return None

        def save_own_variables(self, store: Any) -> None:
            """Writes the whole table in key order (DeepRec's names):
            ``store["keys"]``, ``["values"]``, ``["freqs"]``,
            ``["versions"]``. Collective: every rank calls it (Keras'
            saving does, hbcore_tf.keras.model_saving), the table evicts,
            the rows are allgathered."""
            for name, value in whole_table(self._hb_table).items():
                store[name] = value

        def load_own_variables(self, store: Any) -> None:
            """Restores the table from ``save_own_variables``' entries:
            each rank keeps the keys it owns (at any world size).

            Raises:
                ValueError: the store holds something else (a fixed
                    table's weights, say), or rows of another width;
                    the message names the table.
            """
            names = sorted(store.keys())
            if names != sorted(SAVED_NAMES):
                raise dynamic_checkpoint.DynamicCheckpointError(
                    "DynamicEmbedding %r: the saved weights hold %s, "
                    "expected a dynamic table's %s (a checkpoint of "
                    "another kind of layer?)" % (
                        self.name, names, sorted(SAVED_NAMES)))
            dynamic_checkpoint.restore_rows(
                self._hb_table, self.embeddings, np.asarray(store["keys"]),
                np.asarray(store["values"]), np.asarray(store["freqs"]),
                np.asarray(store["versions"]))

        def get_config(self) -> Dict[str, Any]:
            config = super().get_config()
            config.update({
                "output_dim": self.output_dim,
                "key_dtype": self.key_dtype,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer),
                "combiner": self.combiner,
                "capacity": self.capacity,
                "ev_option": _ev_option.to_config(self.filter_freq,
                                                  self.evict),
            })
            return config

    return register(package="hbcore_tf", name="DynamicEmbedding")(
        DynamicEmbedding)


def whole_table(table: DynamicTable) -> Dict[str, np.ndarray]:
    """Every rank's rows of ``table`` in key order (collective: every rank
    calls it, for the same tables in the same order).

    Args:
        table: the layer's DynamicTable.

    Returns:
        ``{"keys": int64 [N], "values": [N, dim], "freqs": int64 [N],
        "versions": int64 [N]}``: the keys that have a row (after the
        table evicted), each key's count of lookups and its version.
    """
    keys, values = dynamic_checkpoint.whole_rows(table, table.store)
    # The counts and versions go with the keys, allgathered beside them;
    # a key is held by one rank, so both sorts give the same order.
    mine, _ = table.held()
    name = "hbcore.dynamic_counts.%s" % table.info.name
    counted = hbcore.allgather(mine.numpy(), name=name + ".keys")
    order = np.argsort(counted, kind="stable")
    counts = hbcore.allgather(table.counts(mine).numpy(),
                              name=name + ".counts")
    versions = hbcore.allgather(table.versions(mine).numpy(),
                                name=name + ".versions")
    return {"keys": keys, "values": values, "freqs": counts[order],
            "versions": versions[order]}


def is_dynamic_layer(layer: Any) -> bool:
    """Whether ``layer`` is a DynamicEmbedding (of either Keras) that was
    built."""
    return any(type(layer) is cls for cls in _CLASSES.values()) and \
        layer.table is not None


def served_config(config: Dict[str, Any], rows: int) -> Dict[str, Any]:
    """The ServedDynamicEmbedding config of a DynamicEmbedding's config
    (``export_plain_model``), for a table of ``rows`` keys.

    Args:
        config: the layer's ``get_config()``.
        rows: how many keys the whole table holds.

    Returns:
        The served layer's config.
    """
    served = dict(config)
    served.pop("capacity", None)
    # Keys without a row read what the trained layer gives them: their
    # initial row, or 0 with a CounterFilter (not admitted yet).
    options = served.pop("ev_option", None) or {}
    filtered = (options.get("filter_option") or {}).get("filter_freq",
                                                        0) > 1
    served.update({"rows": int(rows),
                   "default_value": 0.0 if filtered else None})
    return served


def layer_class(legacy: Optional[bool] = None) -> type:
    """DynamicEmbedding for Keras 3 (legacy False), tf_keras (True) or the
    Keras in use (None), as ``layers.layer_class`` does for
    ShardedEmbedding."""
    return _compat.class_per_keras(_CLASSES, _make_class, legacy)
