"""``hb.train``: HybridBackend's training API on hbcore.

- ``<Name>Optimizer`` for every tf.compat.v1.train optimizer (generated,
  hbcore_tf.train.optimizers), ``wraps_optimizer`` for your own class;
- ``MonitoredTrainingSession`` (hbcore_tf.train.session);
- ``Server``, ``monitored_session`` and ``device_setter``
  (hbcore_tf.train.server);
- ``EvaluationHook`` (hbcore_tf.train.evaluation, imported on first use);
- ``Saver``: tf.compat.v1.train.Saver for data-parallel jobs: rank 0
  writes the checkpoint, every rank its rows of the sharded tables (whose
  save is collective) (hbcore_tf.train.saver);
- ``StepStatHook``: logs secs/step and <unit>s/sec of this rank every N
  steps (hbcore_tf.train.step_stat_hook);
- ``replace_default_saver``: puts an ``hb.train.Saver`` in the graph's
  SAVERS collection (hbcore_tf.train.saver);
- ``export``: a SavedModel from a checkpoint with sharded tables
  (hbcore_tf.embedding.export.export).
"""
from hbcore_tf.train.optimizers import OPTIMIZERS, wraps_optimizer
from hbcore_tf.train.saver import Saver, replace_default_saver
from hbcore_tf.train.server import Server, device_setter, monitored_session
from hbcore_tf.train.session import MonitoredTrainingSession
from hbcore_tf.train.step_stat_hook import StepStatHook
from hbcore_tf.embedding.export import export

globals().update(OPTIMIZERS)

__all__ = sorted(OPTIMIZERS) + [
    "EvaluationHook", "MonitoredTrainingSession", "Saver", "Server",
    "StepStatHook", "device_setter", "export", "monitored_session",
    "replace_default_saver", "wraps_optimizer"]


def __getattr__(name: str):
    # EvaluationHook lives in its own module (the metrics side), looked up
    # at use: the session's tests stand a stub module in for it.
    if name == "EvaluationHook":
        from hbcore_tf.train.evaluation import EvaluationHook

        return EvaluationHook
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
