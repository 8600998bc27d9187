"""``hb.layers``: HybridBackend's second name for its feature-column layer.

``hb.layers.DenseFeatures`` is ``hb.keras.layers.DenseFeatures``
(hbcore_tf.keras.dense_features), the same class, as in HybridBackend.
"""
from typing import Any


def __getattr__(name: str) -> Any:
    # The layer is a tf_keras class, built on first access so that
    # importing hbcore_tf does not import tf_keras.
    if name == "DenseFeatures":
        from hbcore_tf.keras import dense_features

        return dense_features.layer_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["DenseFeatures"]
