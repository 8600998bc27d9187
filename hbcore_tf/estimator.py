"""``hb.estimator``: only ``ModeKeys`` exists on TensorFlow 2.16+.

TensorFlow 2.16 removed ``tf.estimator`` (and the tensorflow-estimator
package stops at 2.15), so HybridBackend's estimator wrappers
(``Estimator``, ``RunConfig``, ``EstimatorSpec``, ``train_and_evaluate``)
have nothing to wrap: using any of them raises ImportError with the
message below. ``ModeKeys`` stays, because HybridBackend scripts pass its
strings outside estimators too (``hb.scope(mode=ModeKeys.TRAIN)``).
"""
from typing import NoReturn

MESSAGE = (
    "hb.estimator is not available: tf.estimator was removed in TensorFlow "
    "2.16, which hbcore requires. Build the model as a tf.compat.v1 graph "
    "inside `with hb.scope():` and train it with "
    "hb.train.MonitoredTrainingSession (checkpoints, hooks and evaluation "
    "as before), or use Keras `model.fit` inside hb.scope(). See "
    "docs/hybridbackend.md.")


class ModeKeys:
    """The mode strings of ``tf.estimator.ModeKeys`` (TensorFlow 2.15)."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


def __getattr__(name: str) -> NoReturn:
    """Any other public name (``Estimator``, ``RunConfig``, ...) raises
    ImportError, so ``hb.estimator.Estimator(...)`` and ``from
    hbcore_tf.estimator import Estimator`` both fail with the message.

    Raises:
      AttributeError: ``name`` is private or a dunder (what Python's import
        machinery, pickle and inspect probe for must stay AttributeError).
      ImportError: any other name.
    """
    if name.startswith("_"):
        raise AttributeError("module %r has no attribute %r"
                             % (__name__, name))
    raise ImportError("hb.estimator.%s: %s" % (name, MESSAGE),
                      name=__name__)


__all__ = ["ModeKeys"]
