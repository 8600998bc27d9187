"""tf.compat.v1 iterators over synchronized datasets (HybridBackend's
``hb.data.make_one_shot_iterator`` and friends), which initialize hbcore
on first use as hb.context does.

The iterator reads ``synchronized_with_last(ds)``. In
hb.train.MonitoredTrainingSession (and tf.compat.v1's inside hb.scope)
``should_stop()`` turns True on every rank after the last step, as
HybridBackend's detect-end does (hbcore_tf.data.detect_end); elsewhere
(a plain Session, TF's MonitoredTrainingSession) ``get_next()`` raises
tf.errors.OutOfRangeError on every rank in the step after the last.
The iterator's elements are the dataset's (``string_handle()`` feeds
``tf.data.Iterator.from_string_handle``). ``get_next()`` also registers
the batch's weight (1.0 unless the batch is empty) as the graph's
data-sync step weight, so the data-parallel gradient reduction built in
that graph averages over the ranks that had data
(hbcore_tf._parallel.step_weight). Call ``get_next()`` once per training graph,
before building the optimizer's update.
"""
from typing import Any, Optional

import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf._parallel import step_weight as _step_weight
from hbcore_tf.data import detect_end
from hbcore_tf.data.sync import synchronized_with_last


class SyncIterator:
    """A tf.compat.v1 iterator over a synchronized dataset.

    A ``tf.compat.v1.data.Iterator`` over the dataset's elements (its
    ``string_handle``, ``output_types``, ``output_shapes``,
    ``output_classes`` and ``element_spec`` describe the same elements,
    so it feeds ``tf.data.Iterator.from_string_handle``; other attributes
    are the wrapped iterator's); ``get_next`` additionally registers the
    step weight and the end flag (see the module docstring). A feedable
    iterator reads the same batches but registers neither: with
    ``drop_remainder=False``, call this iterator's ``get_next`` in the
    training graph for the step weight.
    """

    def __init__(self, synchronized: tf.data.Dataset,
                 initializable: bool = False) -> None:
        self._end = detect_end.end_flag()
        marked = detect_end.marking_end(synchronized, self._end)
        with tf.device("/cpu:0"):
            self._iterator = (
                tf.compat.v1.data.make_initializable_iterator(marked)
                if initializable else
                tf.compat.v1.data.make_one_shot_iterator(marked))
        # Built once, now: a session's graph may be finalized later.
        self._initializer = (tf.group(self._iterator.initializer,
                                      self._end.assign(False))
                             if initializable else None)

    @property
    def element_spec(self) -> Any:
        """The spec of the dataset's elements."""
        return self._iterator.element_spec

    @property
    def output_types(self) -> Any:
        """The dtypes of the dataset's elements (tf.compat.v1)."""
        return tf.compat.v1.data.get_output_types(self._iterator)

    @property
    def output_shapes(self) -> Any:
        """The shapes of the dataset's elements (tf.compat.v1)."""
        return tf.compat.v1.data.get_output_shapes(self._iterator)

    @property
    def output_classes(self) -> Any:
        """The classes of the dataset's elements (tf.compat.v1)."""
        return tf.compat.v1.data.get_output_classes(self._iterator)

    @property
    def initializer(self) -> Any:
        """The wrapped iterator's initializer, which also clears the end
        flag (a new pass begins)."""
        if self._initializer is None:
            return self._iterator.initializer  # TF's answer (one-shot)
        return self._initializer

    def string_handle(self, name: Optional[str] = None) -> tf.Tensor:
        """A tf.string handle of this iterator, for
        ``tf.data.Iterator.from_string_handle(handle, it.output_types,
        it.output_shapes, it.output_classes)``.

        Args:
          name: the op's name.

        Returns:
          A scalar tf.string tensor.
        """
        return self._iterator.string_handle(name=name)

    def get_next(self, name: Optional[str] = None) -> Any:
        """The next batch; registers its weight and the end flag in the
        graph.

        Args:
          name: the name of the iterator's get_next op.

        Returns:
          The batch: a nested structure of tensors, as the dataset's
          elements.

        Raises:
          ValueError: the graph already has a data-sync step weight (a
            second get_next, or a second data-sync iterator).
          tf.errors.OutOfRangeError: (when run) the synchronized dataset
            is exhausted, on every rank at the same step.
        """
        batch = self._iterator.get_next(name=name)
        _step_weight.register_in_graph(_step_weight.batch_weight(batch))
        detect_end.register(self._end)
        return batch

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._iterator, attr)


def _prepare(what: str) -> None:
    """Refuses eager mode, then initializes hbcore (see below).

    Raises:
        RuntimeError: eager execution is enabled.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "hb.data.%s is for tf.compat.v1 graphs; in TF2 code iterate "
            "hb.data.synchronized(ds) directly" % what)
    # HybridBackend's iterators need no prior call: initialize hbcore as
    # hb.context and hb.scope do (a script never calls init(); one process
    # started without hbrun is a job of one rank).
    context.rank


def make_one_shot_iterator(ds: tf.data.Dataset,
                           drop_remainder: Optional[bool] = None
                           ) -> SyncIterator:
    """A one-shot iterator over ``synchronized(ds, drop_remainder)``.

    Args:
      ds: a batched dataset (see ``synchronized``).
      drop_remainder: see ``synchronized`` (None: the option).

    Returns:
      A SyncIterator.

    Raises:
      RuntimeError: called eagerly.
      TypeError, ValueError: as ``synchronized``.
    """
    _prepare("make_one_shot_iterator")
    return SyncIterator(synchronized_with_last(ds, drop_remainder))


def make_initializable_iterator(ds: tf.data.Dataset,
                                drop_remainder: Optional[bool] = None
                                ) -> SyncIterator:
    """An initializable iterator over ``synchronized(ds, drop_remainder)``.

    Run its ``initializer`` on every rank before each pass (epoch).

    Args:
      ds: a batched dataset (see ``synchronized``).
      drop_remainder: see ``synchronized`` (None: the option).

    Returns:
      A SyncIterator.

    Raises:
      RuntimeError: called eagerly.
      TypeError, ValueError: as ``synchronized``.
    """
    _prepare("make_initializable_iterator")
    return SyncIterator(synchronized_with_last(ds, drop_remainder),
                        initializable=True)


def make_iterator(ds: tf.data.Dataset,
                  drop_remainder: Optional[bool] = None) -> SyncIterator:
    """HybridBackend's ``make_iterator``: a one-shot iterator over
    ``synchronized(ds, drop_remainder)``.

    Args:
      ds: a batched dataset (see ``synchronized``).
      drop_remainder: see ``synchronized`` (None: the option).

    Returns:
      A SyncIterator.

    Raises:
      RuntimeError: called eagerly.
      TypeError, ValueError: as ``synchronized``.
    """
    _prepare("make_iterator")
    return make_one_shot_iterator(ds, drop_remainder)
