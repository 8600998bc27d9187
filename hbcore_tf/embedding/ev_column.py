"""DeepRec's ``categorical_column_with_embedding``: a categorical column of
raw ids (int64 or strings) whose embedding column's table is always a
dynamic table (hbcore_tf.embedding.paiev), with the column's own
``ev_option``.

    col = hb.feature_column.categorical_column_with_embedding(
        "user", dtype=tf.string)
    emb = tf.feature_column.embedding_column(col, 16)
    out, = hb.dense_features(features, [emb])

The column is TensorFlow's identity column of ``sys.maxsize`` buckets with
two changes: its ids may be strings (turned into the same int64 keys a
string DynamicEmbedding uses, ``tf.strings.to_hash_bucket_fast(s, 2**63 -
1)``), and it carries DeepRec's arguments. Integer ids below 0 are dropped
by TensorFlow's safe embedding lookup, as for any identity column.
"""
import sys
from typing import Any, Optional

import tensorflow as tf

from hbcore_tf._patches import internals

# dynamic_table's reduction of a string's fingerprint (2**63 - 1 buckets).
_STRING_BUCKETS = 2 ** 63 - 1
_classes: dict = {}


def _column_class() -> type:
    """The column class (built on first use: it subclasses a private TF
    class)."""
    if "column" in _classes:
        return _classes["column"]
    base = internals.FC_V2_IDENTITY_CATEGORICAL_COLUMN.load()

    class EmbeddingCategoricalColumn(base):
        """An identity column of raw ids for a dynamic table (DeepRec's
        ``EmbeddingCategoricalColumn``)."""

        def __new__(cls, key: str, dtype: Any, partition_num: Any,
                    ev_option: Any) -> Any:
            column = super().__new__(cls, key, sys.maxsize, None)
            column.__dict__.update(
                key_dtype=tf.as_dtype(dtype), partition_num=partition_num,
                ev_option=ev_option)
            return column

        def __getnewargs__(self) -> tuple:
            return (self.key, self.key_dtype, self.partition_num,
                    self.ev_option)

        @property
        def parse_example_spec(self) -> dict:
            return {self.key: tf.io.VarLenFeature(self.key_dtype)}

        def _transform_input_tensor(self, input_tensor: Any) -> Any:
            values = input_tensor.values
            if self.key_dtype == tf.string:
                if values.dtype != tf.string:
                    raise ValueError(
                        "Invalid input, not string. key: %s dtype: %s "
                        "(categorical_column_with_embedding of dtype "
                        "string)" % (self.key, values.dtype.name))
                values = tf.strings.to_hash_bucket_fast(values,
                                                        _STRING_BUCKETS)
            elif not values.dtype.is_integer:
                raise ValueError(
                    "Invalid input, not integer. key: %s dtype: %s "
                    "(categorical_column_with_embedding of dtype %s)" % (
                        self.key, values.dtype.name, self.key_dtype.name))
            return tf.SparseTensor(input_tensor.indices,
                                   tf.cast(values, tf.int64),
                                   input_tensor.dense_shape)

    _classes["column"] = EmbeddingCategoricalColumn
    return EmbeddingCategoricalColumn


def categorical_column_with_embedding(key: str, dtype: Any = tf.string,
                                      partition_num: Optional[int] = None,
                                      ev_option: Any = None) -> Any:
    """DeepRec's ``tf.feature_column.categorical_column_with_embedding``:
    raw ids whose embedding column (``tf.feature_column.embedding_column``
    over it, in ``hb.dense_features`` / ``hb.keras.layers.DenseFeatures``)
    is a dynamic table, whatever ``emb_backend`` is.

    Args:
        key: the feature key (and the column's name).
        dtype: the ids' dtype: tf.string (DeepRec's default), tf.int64 or
            tf.int32.
        partition_num: DeepRec's partitions of the variable; accepted,
            unused (rows are sharded by id hash).
        ev_option: an ``hb.EmbeddingVariableOption`` for the table (None:
            ``paiev_ev_option``'s value for the column).

    Returns:
        The categorical column.

    Raises:
        ValueError: ``key`` is not a non-empty str, or another dtype.
    """
    if not isinstance(key, str) or not key:
        raise ValueError("categorical_column_with_embedding: key must be a "
                         "non-empty str, got %r" % (key,))
    dtype = tf.as_dtype(dtype)
    if dtype not in (tf.string, tf.int64, tf.int32):
        raise ValueError(
            "categorical_column_with_embedding %r: dtype must be string, "
            "int64 or int32, got %s" % (key, dtype.name))
    return _column_class()(key, dtype, partition_num, ev_option)


def is_embedding_column(column: Any) -> bool:
    """Whether ``column`` was made by categorical_column_with_embedding."""
    return "column" in _classes and isinstance(column, _classes["column"])
