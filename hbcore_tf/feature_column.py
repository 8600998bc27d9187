"""``hb.feature_column``: HybridBackend's feature-column module.

As in HybridBackend, ``embedding_column`` and ``shared_embedding_columns``
are TensorFlow's own (``tf.feature_column.embedding_column``,
``tf.compat.v1.feature_column.shared_embedding_columns``): their tables
are sharded when ``hb.keras.layers.DenseFeatures`` or
``hb.dense_features`` looks them up. ``DenseFeatures`` is
``hb.keras.layers.DenseFeatures``. HybridBackend's
``raw_categorical_column`` (an identity column of ``sys.maxsize`` buckets)
has no counterpart: a sharded table has a fixed number of rows
(docs/hybridbackend.md, "Every HybridBackend name").
"""
from typing import Any

import tensorflow as tf

from hbcore_tf import layers as _layers

embedding_column = tf.feature_column.embedding_column
shared_embedding_columns = tf.compat.v1.feature_column.shared_embedding_columns


def __getattr__(name: str) -> Any:
    if name == "DenseFeatures":
        return _layers.DenseFeatures     # built on first access
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["DenseFeatures", "embedding_column", "shared_embedding_columns"]
