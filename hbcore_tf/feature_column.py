"""``hb.feature_column``: HybridBackend's feature-column module.

    import hbcore_tf as hb
    col = hb.feature_column.embedding_column(
        tf.feature_column.categorical_column_with_identity("ad", 10000), 16)
    x = hb.feature_column.DenseFeatures([col])(features)

``embedding_column`` and ``shared_embedding_columns`` are TensorFlow's own
(HybridBackend re-exports them: ``tf.feature_column.embedding_column`` and
the tf.compat.v1 ``shared_embedding_columns``); ``DenseFeatures`` is
``hb.keras.layers.DenseFeatures`` (hbcore_tf.keras.dense_features; it
imports tf_keras on first use). ``raw_categorical_column(key)`` is
HybridBackend's column of unchecked ids (``num_buckets=sys.maxsize``):
its table has no size, which only DeepRec's EmbeddingVariable
(HybridBackend's ``emb_backend='PAIEV'``) can hold, so an embedding column
over it is a ValueError in hb.dense_features and DenseFeatures, as in
HybridBackend's default backend, and a dynamic table under
``emb_backend='PAIEV'``. ``categorical_column_with_embedding`` is
DeepRec's column of raw ids whose table is always a dynamic table.
"""
import sys
from typing import Any

from hbcore_tf._patches import internals
from hbcore_tf.embedding.ev_column import categorical_column_with_embedding

# TensorFlow's own v2 feature-column functions, re-exported as
# HybridBackend does.
categorical_column_with_identity = \
    internals.FC_V2_CATEGORICAL_WITH_IDENTITY.load()
embedding_column = internals.FC_V2_EMBEDDING_COLUMN.load()
shared_embedding_columns = internals.FC_V2_SHARED_EMBEDDING_COLUMNS.load()


def raw_categorical_column(key: str) -> Any:
    """A categorical column of unchecked integer ids (HybridBackend's).

    Args:
        key: the feature key (and the column's name).

    Returns:
        ``categorical_column_with_identity(key, num_buckets=sys.maxsize)``.
    """
    return categorical_column_with_identity(key, num_buckets=sys.maxsize)


DenseFeatures: type


def __getattr__(name: str) -> Any:
    # The layer imports tf_keras: built on first use.
    if name == "DenseFeatures":
        from hbcore_tf.keras import dense_features

        return dense_features.layer_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["DenseFeatures", "categorical_column_with_embedding",
           "embedding_column", "raw_categorical_column",
           "shared_embedding_columns"]
