"""The serving form of a dynamic table: what ``export_plain_model`` puts
in place of a ``DynamicEmbedding`` (docs/embedding.md, "Dynamic tables").

The layer holds the whole trained table of every rank in two weights,
``keys`` (int64 ``[rows]``, ascending: the checkpoint's ``-keys``) and
``values`` (``[rows, dim]``, the row of each key), and looks ids up with
stock TensorFlow ops only, so a SavedModel of it serves without hbcore:

1. an id's key is ``ids_to_keys`` (the int64 itself, a string's 64-bit
   fingerprint), as in training;
2. ``tf.searchsorted`` finds the key's place among the sorted keys, and a
   key found there reads its row;
3. any other key (never trained, or not admitted by a CounterFilter)
   reads what the trained model would give it: with no filter the key's
   initial row (``KeyInitializer``, integer and float ops), with a filter
   DeepRec's ``default_value_no_permission``, 0.

Sorted keys in a variable rather than a ``tf.lookup.StaticHashTable``:
the keys are saved as a variable (a hash table built from constants puts
every key in the graph, which TensorFlow caps at 2 GB), they are the same
tensor the checkpoint holds, and a lookup is ``log2(rows)`` comparisons
per id.
"""
from typing import Any, Dict, Optional

import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf.embedding.dynamic_init import KeyInitializer
from hbcore_tf.embedding.dynamic_table import check_key_dtype, ids_to_keys
from hbcore_tf.keras.id_lookups import IdLookupCalls, check_combiner

_CLASSES: Dict[bool, type] = {}


def _make_class(legacy: bool) -> type:
    keras, register = _compat.keras_flavour(legacy)

    class ServedDynamicEmbedding(IdLookupCalls, keras.layers.Layer):
        """A trained dynamic table, frozen for serving (see the module
        docstring); made by ``export_plain_model``.

        Args:
            output_dim: the embedding dimension.
            rows: how many keys the table holds.
            key_dtype: "int64" or "string".
            embeddings_initializer: the trained layer's initializer (the
                rows of keys the table does not hold).
            combiner: None, or "sum" / "mean" / "sqrtn".
            default_value: None: keys the table does not hold read their
                initial row; a number: they read that value (a table
                with a CounterFilter).
            name: layer name.
            **kwargs: other Keras layer arguments.
        """

        _HB_KIND = "ServedDynamicEmbedding"

        def __init__(self, output_dim: int, rows: int,
                     key_dtype: Any = "int64",
                     embeddings_initializer: Any = "uniform",
                     combiner: Optional[str] = None,
                     default_value: Optional[float] = None,
                     name: Optional[str] = None, **kwargs: Any) -> None:
            super().__init__(name=name, **kwargs)
            check_combiner(self._HB_KIND, combiner)
            self.output_dim = int(output_dim)
            self.rows = int(rows)
            self.key_dtype = check_key_dtype(key_dtype, self.name)
            self.embeddings_initializer = keras.initializers.get(
                embeddings_initializer)
            self.combiner = combiner
            self.default_value = default_value
            object.__setattr__(self, "_hb_initial", KeyInitializer(
                self.embeddings_initializer, self.name))
            self._supports_ragged_inputs = True  # tf_keras: keep ragged ids

        def build(self, input_shape: Any = None) -> None:
            self.keys = self.add_weight(
                shape=(self.rows,), dtype="int64", initializer="zeros",
                name="keys", trainable=False)
            self.values = self.add_weight(
                shape=(self.rows, self.output_dim), initializer="zeros",
                name="values", trainable=False)
            self.built = True

        def _table_name(self) -> str:
            return self.name

        def _defaults(self, keys: tf.Tensor) -> tf.Tensor:
            if self.default_value is None:
                return self._hb_initial(keys, self.output_dim,
                                        self.values.dtype)
            return tf.fill(tf.stack([tf.size(keys), self.output_dim]),
                           tf.cast(self.default_value, self.values.dtype))

        def _lookup(self, ids: Any) -> tf.Tensor:
            keys = ids_to_keys(ids, self.key_dtype, self.name)
            flat = tf.reshape(keys, [-1])
            rows = self._defaults(flat)
            if self.rows > 0:
                held = tf.convert_to_tensor(self.keys)
                at = tf.minimum(tf.searchsorted(held, flat, out_type=tf.int64),
                                self.rows - 1)
                found = tf.equal(tf.gather(held, at), flat)
                rows = tf.where(found[:, None], tf.gather(
                    tf.convert_to_tensor(self.values), at), rows)
            out = tf.reshape(rows, tf.concat(
                [tf.shape(keys), [self.output_dim]], 0))
            if out.dtype != self.compute_dtype:
                out = tf.cast(out, self.compute_dtype)
            return out

        def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
            return None

        def get_config(self) -> Dict[str, Any]:
            config = super().get_config()
            config.update({
                "output_dim": self.output_dim,
                "rows": self.rows,
                "key_dtype": self.key_dtype,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer),
                "combiner": self.combiner,
                "default_value": self.default_value,
            })
            return config

    return register(package="hbcore_tf", name="ServedDynamicEmbedding")(
        ServedDynamicEmbedding)


def layer_class(legacy: Optional[bool] = None) -> type:
    """ServedDynamicEmbedding for Keras 3 (legacy False), tf_keras (True)
    or the Keras in use (None)."""
    return _compat.class_per_keras(_CLASSES, _make_class, legacy)
