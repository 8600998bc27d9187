"""SyncBatchNormalization: batch normalization over the global batch.

    import hbcore_tf as hvd
    hvd.init()
    model = keras.Sequential([..., hvd.SyncBatchNormalization(), ...])

In training, the mean and variance that normalize the batch (and feed the
moving statistics) are those of the concatenation of every rank's batch,
whatever each rank's batch size; inference uses the moving statistics, as
BatchNormalization does. The layer is a subclass of the BatchNormalization
of the Keras in use (Keras 3, or tf_keras when TF_USE_LEGACY_KERAS=1), with
horovod.tensorflow 0.28's signature: ``SyncBatchNormalization(fused=False,
**kwargs)``, and ``fused=True`` (or None) raises ValueError.

How the statistics are combined (:func:`global_moments`), per call:

1. Each rank reduces its own batch to, per channel, the count n_r, the
   mean m_r and the sum of squared deviations M2_r about m_r (two passes
   over the local data, like tf.nn.moments).
2. One Sum allreduce of one float64 vector [n_r*m_r, M2_r + n_r*m_r^2, n_r]
   gives S1, S2 and N, the sums over ranks; mean = S1/N and
   variance = S2/N - mean^2.
   The subtraction in float64 cancels only the spread of the per-rank means
   around the global mean (Sum(M2_r)/N stays intact), so the result keeps
   the accuracy of a two-pass variance even when |mean| >> stddev.
3. The gradient flows through the allreduce (its gradient is a Sum
   allreduce of the upstream gradients, hbcore_tf._ops.collective_gradients), so the
   gradient w.r.t. a rank's inputs is that of the summed loss of all ranks:
   the gradient of single-process BatchNormalization on the concatenated
   batch. Each rank's gamma/beta gradient is its share of that gradient;
   DistributedOptimizer's Sum (or Average) over ranks completes it.

Cross-rank contract: every rank calls the layer the same number of times,
in the same order, with the same ``training`` value and channel count
(batch sizes may differ, including zero rows), so every rank submits the
same collectives. With tf_keras' ``virtual_batch_size`` the number of
virtual batches must also be equal on every rank.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._ops.xla import check_not_xla
from hbcore_tf.mpi_ops import Sum, allreduce

# Horovod 0.28's message (horovod/tensorflow/sync_batch_norm.py).
FUSED_ERROR = "SyncBatchNormalization does not support fused=True."


def _check_fused(fused: Any) -> None:
    if fused in (True, None):
        raise ValueError(FUSED_ERROR)


def global_moments(inputs: Any, axes: Sequence[int], keepdims: bool = False,
                   weights: Optional[Any] = None,
                   name: Optional[str] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Mean and (biased) variance of ``inputs`` over ``axes`` and over all
    ranks: the moments of the concatenation of every rank's ``inputs``.

    Issues exactly one allreduce (a Sum of one float64 vector), so every
    rank must call it the same number of times in the same order.

    Args:
        inputs: a floating tensor; its non-reduced dimensions must be the
            same on every rank, the reduced ones (the batch) may differ.
        axes: the axes to reduce.
        keepdims: keep the reduced axes with length 1.
        weights: optional frequency weights broadcastable to ``inputs``
            (e.g. a mask); the moments are the weighted ones.
        name: name of the allreduce (derived from the graph when None).

    Returns:
        (mean, variance) in ``inputs``' dtype. Where no rank has data
        (N == 0) both are 0.

    Raises:
        ValueError: called while tracing for XLA, or hbcore not initialized.
    """
    check_not_xla("SyncBatchNormalization")
    x = tf.convert_to_tensor(inputs)
    axes = sorted({int(a) % x.shape.rank for a in axes})
    if weights is None:
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        local_sum = tf.reduce_sum(x, axes, keepdims=True)
        w = None
    else:
        w = tf.cast(tf.broadcast_to(weights, tf.shape(x)), x.dtype)
        count = tf.reduce_sum(w, axes, keepdims=True)
        local_sum = tf.reduce_sum(x * w, axes, keepdims=True)
    # divide_no_nan: a rank with no rows contributes zeros, not NaNs.
    local_mean = tf.math.divide_no_nan(local_sum, count)
    # The deviations are taken about a constant: sum(w * (x - m)) = 0, so
    # the derivative through m vanishes there and flows through S1 instead.
    squares = tf.square(x - tf.stop_gradient(local_mean))
    if w is not None:
        squares = squares * w
    local_m2 = tf.reduce_sum(squares, axes, keepdims=True)

    n64 = tf.cast(count, tf.float64)
    mean64 = tf.cast(local_mean, tf.float64)
    s1 = n64 * mean64
    s2 = tf.cast(local_m2, tf.float64) + n64 * tf.square(mean64)
    k = tf.size(s1)
    payload = tf.concat([tf.reshape(s1, [-1]), tf.reshape(s2, [-1]),
                         tf.reshape(n64, [-1])], axis=0)
    total = allreduce(payload, op=Sum, name=name)
    stats_shape = tf.shape(s1)
    g1 = tf.reshape(total[:k], stats_shape)
    g2 = tf.reshape(total[k:2 * k], stats_shape)
    gn = tf.reshape(total[2 * k:], tf.shape(n64))
    mean = tf.math.divide_no_nan(g1, gn)
    variance = tf.maximum(tf.math.divide_no_nan(g2, gn) - tf.square(mean),
                          tf.constant(0.0, tf.float64))
    mean = tf.cast(mean, x.dtype)
    variance = tf.cast(variance, x.dtype)
    if not keepdims:
        mean = tf.squeeze(mean, axes)
        variance = tf.squeeze(variance, axes)
    return mean, variance


def _mask_weights(mask: Any, inputs: Any) -> tf.Tensor:
    """A Keras mask (inputs' shape without the channel axis) as weights
    with a trailing axis of length 1."""
    return tf.expand_dims(tf.cast(mask, inputs.dtype), axis=-1)


_DOC = """Batch normalization whose training statistics are those of the
    global batch (all ranks' batches concatenated).

    Args:
        fused: must be False (Horovod's signature; True or None raise).
        **kwargs: as the Keras BatchNormalization of the Keras in use.

    Raises:
        ValueError: fused is True or None.
    """


def _keras3_class() -> type:
    import keras

    @keras.saving.register_keras_serializable(package="hbcore_tf")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        __doc__ = _DOC

        def __init__(self, fused: Any = False, **kwargs: Any) -> None:
            _check_fused(fused)
            # Keras 3's BatchNormalization has no `fused` argument.
            super().__init__(**kwargs)
            # The allreduce has no XLA kernel: a model holding this layer
            # then compiles without XLA (Keras 3's jit_compile="auto" turns
            # it on for GPUs; jit_compile=True falls back with a warning).
            self.supports_jit = False

        def _moments(self, inputs: Any, mask: Any) -> Tuple[Any, Any]:
            weights = None if mask is None else _mask_weights(mask, inputs)
            return global_moments(inputs, self._reduction_axes,
                                  keepdims=False, weights=weights)

    return SyncBatchNormalization


def _tf_keras_class() -> type:
    import tf_keras

    @tf_keras.utils.register_keras_serializable(package="hbcore_tf")
    class SyncBatchNormalization(tf_keras.layers.BatchNormalization):
        __doc__ = _DOC

        def __init__(self, fused: Any = False, **kwargs: Any) -> None:
            _check_fused(fused)
            super().__init__(fused=False, **kwargs)

        def _calculate_mean_and_var(self, inputs: Any, reduction_axes: Any,
                                    keep_dims: bool, mask: Any = None
                                    ) -> Tuple[Any, Any]:
            weights = None if mask is None else _mask_weights(mask, inputs)
            return global_moments(inputs, reduction_axes, keepdims=keep_dims,
                                  weights=weights)

    return SyncBatchNormalization


_CLASSES: Dict[bool, type] = {}


def layer_class(legacy: Optional[bool] = None) -> type:
    """Returns SyncBatchNormalization for Keras 3 or tf_keras (built and
    registered for serialization once per process).

    Args:
        legacy: True for tf_keras, False for Keras 3; None follows
            TF_USE_LEGACY_KERAS, as ``tf.keras`` does.

    Raises:
        ImportError: the requested Keras is not installed.
    """
    return _compat.class_per_keras(
        _CLASSES, lambda tf_keras: _tf_keras_class() if tf_keras
        else _keras3_class(), legacy)


def __getattr__(name: str) -> Any:
    # Built on first use, for the Keras in use (see layer_class).
    if name == "SyncBatchNormalization":
        return layer_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
