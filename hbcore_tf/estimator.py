"""``hb.estimator`` cannot exist on TensorFlow 2.16+.

TensorFlow 2.16 removed ``tf.estimator`` (and the tensorflow-estimator
package stops at 2.15), so HybridBackend's estimator wrappers have nothing
to wrap. Importing this module raises the ImportError below.
"""

MESSAGE = (
    "hb.estimator is not available: tf.estimator was removed in TensorFlow "
    "2.16, which hbcore requires. Build the model as a tf.compat.v1 graph "
    "inside `with hb.scope():` and train it with "
    "hb.train.MonitoredTrainingSession (checkpoints, hooks and evaluation "
    "as before), or use Keras `model.fit` inside hb.scope(). See "
    "docs/hybridbackend.md.")

raise ImportError(MESSAGE)
