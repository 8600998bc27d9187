"""Stopping a tf.compat.v1 MonitoredTrainingSession after the last
synchronized step (HybridBackend's detect-end), instead of failing the
step after it with OutOfRangeError.

Protocol:
1. A data-sync iterator (hbcore_tf.data.iterators) reads
   ``synchronized_with_last(ds)``: each batch comes with ``is_last``, the
   same on every rank.
2. The last map of its pipeline (``marking_end``) assigns ``is_last`` to
   the graph's end flag, a local bool variable registered in
   ``END_COLLECTION``, and yields the batch alone: the iterator's elements
   are the dataset's elements (so its ``string_handle()`` feeds
   ``tf.data.Iterator.from_string_handle`` with its ``output_types``), and
   any step that takes a batch has set the flag by the time its run
   returns (the map runs inside the step's GetNext; the pipeline reads
   nothing ahead after data sync).
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
    """A new end flag of the default graph: a local bool variable, False,
    on the host (where the input pipeline that sets it runs).

    Returns:
      The variable (not yet registered; see ``register``).
    """
    with tf.device("/cpu:0"):
        return tf.compat.v1.Variable(
            False, trainable=False, name="hb_data_sync_end",
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
            use_resource=True)


def marking_end(ds: tf.data.Dataset, flag: tf.Variable) -> tf.data.Dataset:
    """``ds`` of ``(element, is_last)`` as a dataset of the elements that
    assigns each one's ``is_last`` to ``flag`` as it yields it.

    The map reaches the variable through a handle of its own with the
    variable's container and shared name (the same resource in the
    session), not by capturing it: a one-shot iterator captures by value,
    which a variable cannot be.

    Args:
      ds: a dataset of ``(element, is_last)``, ``is_last`` a bool scalar.
      flag: a variable from ``end_flag``.

    Returns:
      The dataset of elements.
    """
    op = flag.handle.op
    container, shared_name = op.get_attr("container"), op.get_attr(
        "shared_name")

    def mark(element: Any, is_last: tf.Tensor) -> Any:
        handle = tf.raw_ops.VarHandleOp(dtype=tf.bool, shape=[],
                                        container=container,
                                        shared_name=shared_name)
        with tf.control_dependencies([tf.raw_ops.AssignVariableOp(
                resource=handle, value=is_last)]):
            return tf.nest.map_structure(tf.identity, element,
                                         expand_composites=True)

    return ds.map(mark)


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
