"""horovod.tensorflow.util: the helpers Horovod's public module offers.

Horovod scripts and Horovod's own tests ask ``hvd.util._executing_eagerly()``
(and ``hvd._executing_eagerly()``) which mode the code runs in before
choosing between eager values and ``session.run``. TensorFlow 2 always has
eager execution, so the answer is TensorFlow's own, evaluated at the call
(inside ``tf.function`` or a ``tf.Graph().as_default()`` block it is False).
"""
import tensorflow as tf


def _executing_eagerly() -> bool:
    """Returns whether the calling code runs eagerly.

    Returns:
        ``tf.executing_eagerly()`` at the call: False while building a
        graph (``tf.function``, ``tf.compat.v1`` graph mode), True otherwise.
    """
    return tf.executing_eagerly()


__all__ = ["_executing_eagerly"]
