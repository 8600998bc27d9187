"""Data sync: training on ranks that hold different numbers of batches.

``synchronized(ds)`` returns a dataset that yields the same number of
elements on every rank, so a training loop (``model.fit``, a custom loop,
a MonitoredTrainingSession) runs the same number of steps everywhere and no
rank waits forever in a gradient allreduce that the others never join.

Protocol (the same on every rank; one scalar collective per element):

1. Each element of ``ds`` is tagged ``has_data = 1``. After the last one
   an endless stream of empty batches (same structure, leading dimension
   0, see ``_empty_batch``) tagged ``has_data = 0`` follows.
2. For every element, in order, the rank submits one int32 scalar
   allreduce of ``has_data`` under a name fixed when the dataset is built
   (``hb_data_sync.<n>``, n counting the ``synchronized`` calls of the
   process, or the caller's ``name``): Min with ``drop_remainder=True``,
   Max with ``drop_remainder=False``. The k-th allreduce of one rank meets
   the k-th allreduce of every other rank, because each rank submits them
   one at a time from a sequential ``map``. (tf.data's default
   ``map_parallelization`` rewrite would make that map parallel, stateful
   op or not, and so read ahead; ``synchronized`` turns it off.)
3. The element is yielded while the reduced flag is 1: with Min while
   every rank has data (so all stop at the first step some rank cannot
   fill, and that step is not run); with Max while some rank has data (a
   rank that is out yields its empty batches meanwhile). The first 0 ends
   the dataset on every rank at the same element (``take_while``), so
   every rank submits exactly the same number of allreduces.

Step weight: in the ``drop_remainder=False`` steps where a rank feeds an
empty batch, its gradient must not count. ``batch_weight(batch)`` (1.0 for
a non-empty batch) is what the data-parallel gradient reduction needs; the
v1 iterators of this package register it in the graph, Keras models built
in ``hb.scope`` push it in their train step, and custom TF2 loops use
``step_weight(batch)``.

Elements are produced only when the training loop asks for them: do not
put ``prefetch`` (or anything else that reads ahead in a background
thread) after ``synchronized``; prefetch upstream instead
(``synchronized(ds.prefetch(n))``). A loop that stops early (a step limit)
then stops at the same element on every rank, and no rank is left with a
submitted allreduce that the others never join.
"""
import itertools
import os
import threading
from typing import Any, Optional

import tensorflow as tf

from hbcore_tf import mpi_ops
from hbcore_tf._base.options import options
from hbcore_tf._parallel import step_weight as _step_weight
from hbcore_tf.data._empty_batch import empty_batch


_counter = itertools.count()
_counter_lock = threading.Lock()


def _default_drop_remainder() -> bool:
    """The ``data_sync_drop_remainder`` option (hbcore_tf._base.options: its
    default True, HB_DATA_SYNC_DROP_REMAINDER, or a scope's value): what a
    ``drop_remainder`` argument of None means.

    Raises:
      ValueError: HB_DATA_SYNC_DROP_REMAINDER is not a boolean.
    """
    return bool(options.data_sync_drop_remainder)


def resolve_drop_remainder(drop_remainder: Optional[bool]) -> bool:
    """``drop_remainder`` itself when given, else the option's value.

    Args:
      drop_remainder: True, False, or None (the
        ``data_sync_drop_remainder`` option).

    Returns:
      The drop_remainder to use.

    Raises:
      TypeError: ``drop_remainder`` is neither None nor a bool.
      ValueError: (None only) HB_DATA_SYNC_DROP_REMAINDER is not a
        boolean.
    """
    if drop_remainder is None:
        return _default_drop_remainder()
    if not isinstance(drop_remainder, bool):
        raise TypeError("drop_remainder must be True, False or None (the "
                        "data_sync_drop_remainder option), got %r" % (
                            drop_remainder,))
    return drop_remainder


def _next_name() -> str:
    with _counter_lock:
        return "hb_data_sync.%d" % next(_counter)


def synchronized(ds: tf.data.Dataset, drop_remainder: Optional[bool] = None,
                 name: Optional[str] = None) -> tf.data.Dataset:
    """Makes every rank yield the same number of batches from ``ds``.

    Every rank must call this for its dataset, in the same order as the
    other ranks' calls (the call order names the collective), and iterate
    the result in lockstep with the other ranks (one element per training
    step, as a training loop does).

    Args:
      ds: a batched dataset (every component has a leading batch
        dimension; dense, ragged and sparse components; dicts and tuples
        such as ``(x, y)`` or ``(x, y, sample_weight)``). Ranks may hold
        different numbers of batches.
      drop_remainder: True: stop on every rank when the first rank runs out
        (the rank with the fewest batches sets the step count). False:
        continue until every rank is out; ranks that are out yield empty
        batches (leading dimension 0) meanwhile, whose gradients the
        data-parallel reduction leaves out (see ``step_weight``). None:
        the ``data_sync_drop_remainder`` option (default True).
      name: the collective's name (default ``hb_data_sync.<n>``, n counting
        this process's calls); must be the same on every rank.

    Returns:
      A tf.data.Dataset with ``ds``'s structure. Iterate it from the
      beginning for every epoch; each pass costs one int32 scalar
      allreduce per element (plus one at the end).

    Raises:
      TypeError: ``ds`` is not a tf.data.Dataset, or bad ``drop_remainder``.
      ValueError: hbcore is not initialized, or a component of ``ds``
        cannot be given an empty batch (no batch dimension, unknown
        non-batch dimension); the message names the component.
    """
    agreed, _ = _agreed(ds, drop_remainder, name, "synchronized")
    synced = (agreed.take_while(lambda element, anyone: anyone > 0)
              .map(lambda element, anyone: element))
    return synced.with_options(_lockstep_options(ds))


def synchronized_with_last(ds: tf.data.Dataset,
                           drop_remainder: Optional[bool] = None,
                           name: Optional[str] = None) -> tf.data.Dataset:
    """``synchronized(ds)``, each element paired with whether it is the
    last one: ``(element, is_last)``, ``is_last`` a bool scalar, the same
    on every rank. What the v1 iterators use to stop a
    MonitoredTrainingSession after the last step (HybridBackend's
    detect-end) instead of failing the step after it.

    To know it, the dataset reads one element ahead: producing element k
    pulls element k + 1 from ``ds`` and submits its allreduce. Every rank
    reads ahead alike, so the k-th allreduces still meet; a loop that stops
    at ``is_last`` has submitted exactly the allreduces of the elements up
    to the first that no rank (drop_remainder=False) or not every rank
    (True) could fill, on every rank.

    Args:
      ds: a batched dataset (see ``synchronized``).
      drop_remainder: see ``synchronized`` (None: the option).
      name: the collective's name (see ``synchronized``).

    Returns:
      A tf.data.Dataset of ``(element, is_last)``.

    Raises:
      TypeError, ValueError: as ``synchronized``.
    """
    agreed, empty = _agreed(ds, drop_remainder, name,
                            "synchronized_with_last")
    spec = ds.element_spec

    def flat(element: Any) -> tuple:
        # tf.data's scan keeps no composite tensors (ragged, sparse) in its
        # state: the state holds the element's component tensors.
        return tuple(tf.nest.flatten(element, expand_composites=True))

    def pair(previous: Any, current: Any) -> Any:
        # Emits the previous element with its flag and whether the current
        # one (its successor) ends the dataset; keeps the current one.
        (previous_parts, previous_anyone), (parts, anyone) = previous, current
        return (parts, anyone), (previous_parts, previous_anyone,
                                 tf.equal(anyone, 0))

    paired = (agreed.map(lambda element, anyone: (flat(element), anyone))
              # The first output pairs a placeholder with element 1: skipped.
              .scan((flat(empty), tf.constant(0, tf.int32)), pair)
              .skip(1)
              .take_while(lambda parts, anyone, is_last: anyone > 0)
              .map(lambda parts, anyone, is_last: (
                  tf.nest.pack_sequence_as(spec, list(parts),
                                           expand_composites=True),
                  is_last)))
    return paired.with_options(_lockstep_options(ds))


def _agreed(ds: tf.data.Dataset, drop_remainder: Optional[bool],
            name: Optional[str], caller: str) -> Any:
    """Steps 1 and 2 of the protocol: ``(element, anyone)`` for every
    element of ``ds`` followed by endless empty batches, ``anyone`` the
    reduced has_data flag (Min or Max over the ranks).

    Returns:
      That dataset, and the empty batch of ``ds``'s structure.

    Raises:
      TypeError, ValueError: as ``synchronized``.
    """
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError("%s: expected a tf.data.Dataset, got %s" %
                        (caller, type(ds).__name__))
    drop = resolve_drop_remainder(drop_remainder)
    if not mpi_ops.is_initialized():
        raise ValueError("%s: hbcore is not initialized; call hvd.init() "
                         "first" % caller)
    empty = empty_batch(ds.element_spec)
    op = mpi_ops.Min if drop else mpi_ops.Max
    coll_name = name if name is not None else _next_name()

    ones = tf.data.Dataset.from_tensors(tf.constant(1, tf.int32)).repeat()
    padding = tf.data.Dataset.from_tensors(
        (empty, tf.constant(0, tf.int32))).repeat()
    tagged = tf.data.Dataset.zip((ds, ones)).concatenate(padding)

    def agree(element: Any, has_data: tf.Tensor) -> Any:
        # Traced once; every rank's graph holds the same single collective.
        anyone = mpi_ops.allreduce(has_data, op=op, name=coll_name)
        return element, anyone

    return tagged.map(agree), empty


def _lockstep_options(ds: tf.data.Dataset) -> tf.data.Options:
    # Nothing may pull elements (and so submit collectives) before the
    # training loop asks for them. tf.data's default rewrites would: an
    # injected prefetch, and map_parallelization, which turns a plain map
    # (even this stateful one, and the stateless projection after the
    # take_while) into a parallel map that reads ahead in a background
    # thread; a rank that then stops early leaves a submitted allreduce
    # behind that another rank never matched. These options hold for the
    # whole pipeline; maps upstream that should run in parallel say so
    # with num_parallel_calls.
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_warm_start = False
    # The sync map's allreduce is asynchronous; without a pool of its own,
    # tf.data runs the map on the pool of the caller of GetNext (the
    # inter-op pool when the iterator is read inside a tf.function or a
    # v1 graph), where GetNext itself holds a thread while it waits for
    # the map: with one inter-op thread every step then stalls (measured:
    # ~0.4 s per step, and a livelock under load). The private pool is as
    # large as tf.data's default shared pool, unless the pipeline already
    # has one of at least 2 threads.
    existing = ds.options().threading.private_threadpool_size or 0
    if existing < 2:
        options.threading.private_threadpool_size = max(
            2, len(os.sched_getaffinity(0)))
    return options


def batch_weight(batch: Any) -> tf.Tensor:
    """1.0 when ``batch`` holds at least one example, else 0.0 (float32).

    Args:
      batch: an element of a synchronized dataset.

    Returns:
      A float32 scalar tensor.
    """
    return _step_weight.batch_weight(batch)


def step_weight(batch: Any) -> Any:
    """Context manager for custom TF2 training loops: inside it, the
    gradients that hbcore averages across ranks (DistributedGradientTape,
    DistributedOptimizer, hb.scope optimizers) count this rank only when
    ``batch`` is not empty; the result is the mean over the ranks that had
    data.

    Usage, in a tf.function or eagerly::

        for x, y in hb.data.synchronized(ds, drop_remainder=False):
            with hb.data.step_weight(x):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x))
                tape = hvd.DistributedGradientTape(tape)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))

    The gradient computation (``tape.gradient``) or the distributed
    ``apply_gradients`` must run inside the ``with``; the loss of an empty
    batch may be NaN (a mean over 0 examples): its gradient is masked out.

    Args:
      batch: the step's batch (or any of its components).

    Returns:
      A context manager.
    """
    return _step_weight.using(_step_weight.batch_weight(batch))
