"""Stopping a tf.compat.v1 MonitoredTrainingSession after the last
synchronized step (HybridBackend's detect-end), instead of failing the
step after it with OutOfRangeError.

Protocol:
1. A data-sync iterator (hbcore_tf.data.iterators) reads
   ``synchronized_with_last(ds)``: each batch comes with ``is_last``, the
   same on every rank.
2. Its ``get_next()`` assigns ``is_last`` to the graph's end flag, a local
   bool variable registered in ``END_COLLECTION``, and returns the batch
   through identities that depend on that assignment: any step that uses
   the batch has set the flag by the time its run returns.
3. ``DetectEndHook`` (added by hb.train.MonitoredTrainingSession) reads
   the flag after every run, in a run of its own: reading it inside the
   step's run could see it before or after the assignment, and fetching
   ``is_last`` itself would pull a batch in runs that take none. When it
   is set the hook requests a stop: every rank stops after the same step,
   ``should_stop()`` turns True, and no step fails.

A run that takes no batch leaves the flag as the last step set it, False
until the last step, after which the session stops. The iterator's
``initializer`` clears it.
"""
from typing import Any, Optional

import tensorflow as tf

END_COLLECTION = "hbcore_tf_data_sync_end"


def end_flag() -> tf.Variable:
    """A new end flag of the default graph: a local bool variable, False.

    Returns:
      The variable (not yet registered; see ``register``).
    """
    return tf.compat.v1.Variable(
        False, trainable=False, name="hb_data_sync_end",
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
        use_resource=True)


def register(flag: tf.Variable) -> None:
    """Makes ``flag`` the end flag DetectEndHook reads in its graph.

    Args:
      flag: a variable from ``end_flag``.
    """
    flag.graph.add_to_collection(END_COLLECTION, flag)


class DetectEndHook(tf.compat.v1.train.SessionRunHook):
    """Requests a stop after the run that took the last synchronized batch
    (see the module docstring). Does nothing in a graph without a
    data-sync iterator."""

    def __init__(self) -> None:
        self._read: Optional[tf.Tensor] = None

    def begin(self) -> None:
        """Builds the read of the graph's end flag, if it has one (at most
        one: a second data-sync get_next in a graph is a ValueError)."""
        flags = tf.compat.v1.get_collection(END_COLLECTION)
        self._read = flags[0].read_value() if flags else None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Requests a stop once the end flag is set.

        Args:
          run_context: the run's SessionRunContext.
          run_values: unused.
        """
        del run_values
        if self._read is not None and run_context.session.run(self._read):
            run_context.request_stop()
