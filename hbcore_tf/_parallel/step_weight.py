"""The weight of this rank's batch in the current training step.

Data sync with ``data_sync_drop_remainder=False`` (hbcore_tf.data) lets
ranks that ran out of data keep joining steps with empty batches. Such a
rank's gradient must not count: a step's gradient is the average over the
ranks that had data in that step. The data-parallel gradient reduction
(hb.scope, hb.train optimizers) therefore asks this module for the step's
weight and, when there is one, reduces

    sum_r (w_r * g_r)  /  sum_r w_r        (w_r is 1.0 or 0.0)

with the weight travelling as one more scalar in the gradients' fused
allreduce (no extra collective). A rank with w_r = 0 contributes zeros even
if its gradient is NaN (the mean loss of an empty batch is 0/0).

Who sets the weight, and where it is looked up:

- tf.compat.v1 graphs: the data-sync iterators (hb.data.make_*_iterator)
  call ``register_in_graph(w)``; the weight is stored in a collection of the
  graph that holds the iterator's get_next(), so every optimizer built in
  that graph sees it.
- TF2 (tf.function, Keras train steps, eager): the caller wraps the code
  that computes and applies gradients in ``using(w)``. The weight is kept on
  a thread-local stack and is only returned to code that runs in the same
  graph (or eagerly, when the weight is eager), so a weight traced into one
  tf.function never leaks into another.

Invariant: ``current()`` depends only on the graph being built and on the
code's own nesting, never on the rank, so every rank builds the same
collectives.
"""
import contextlib
import threading
from typing import Any, Iterator, List, Optional

import tensorflow as tf

GRAPH_COLLECTION = "hbcore_tf_data_sync_step_weight"

_local = threading.local()


def _stack() -> List[Any]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _first_column(batch: Any) -> Any:
    """The first column of a batch in tf.nest's order (dicts by sorted
    key), or None. hb.data.DataFrame.Value (a namedtuple of ``values`` and
    ``nested_row_splits``, recognised by its fields: hbcore_tf.data sits
    above this module) is one column, not a tuple to descend into: its
    values count items, not rows."""
    if isinstance(batch, tuple) and getattr(batch, "_fields", None) == (
            "values", "nested_row_splits"):
        return batch
    if isinstance(batch, dict):
        children = [batch[k] for k in sorted(batch)]
    elif isinstance(batch, (list, tuple)):
        children = list(batch)
    else:
        return batch
    for child in children:
        first = _first_column(child)
        if first is not None:
            return first
    return None


def batch_weight(batch: Any) -> tf.Tensor:
    """1.0 when ``batch`` holds at least one example, else 0.0.

    Args:
      batch: a nested structure of tensors (dense, ragged, sparse or
        hb.data.DataFrame.Value) whose first dimension is the batch.

    Returns:
      A float32 scalar tensor.

    Raises:
      ValueError: ``batch`` holds no tensor.
    """
    first = _first_column(batch)
    if first is None:
        raise ValueError("batch_weight: the batch holds no tensor")
    if isinstance(first, tuple):
        splits = first.nested_row_splits
        rows = (tf.size(splits[0], out_type=tf.int64) - 1 if splits else
                tf.shape(first.values, out_type=tf.int64)[0])
    elif isinstance(first, tf.SparseTensor):
        rows = first.dense_shape[0]
    elif isinstance(first, tf.RaggedTensor):
        rows = first.nrows()
    else:
        rows = tf.shape(first, out_type=tf.int64)[0]
    return tf.cast(tf.greater(rows, 0), tf.float32)


@contextlib.contextmanager
def using(weight: Any) -> Iterator[None]:
    """Makes ``weight`` the step weight for the code inside (TF2 path).

    Args:
      weight: a float scalar tensor (1.0: this rank has data in the step).
    """
    weight = tf.convert_to_tensor(weight, tf.float32)
    _stack().append(weight)
    try:
        yield
    finally:
        _stack().pop()


def register_in_graph(weight: tf.Tensor) -> None:
    """Makes ``weight`` the step weight of its tf.compat.v1 graph.

    Args:
      weight: a float32 scalar graph tensor.

    Raises:
      ValueError: the graph already has a step weight (two data-sync
        iterators in one training graph would disagree on it).
    """
    graph = weight.graph
    if graph.get_collection(GRAPH_COLLECTION):
        raise ValueError(
            "this graph already has a data-sync iterator; a training graph "
            "may read from one data-sync iterator only")
    graph.add_to_collection(GRAPH_COLLECTION, weight)


def current() -> Optional[tf.Tensor]:
    """The step weight that applies to code built here, or None.

    Returns:
      The innermost ``using`` weight that lives in the graph being built
      (or is eager while executing eagerly), else the weight registered in
      the current tf.compat.v1 graph, else None.
    """
    if tf.executing_eagerly():
        for weight in reversed(_stack()):
            if not tf.is_symbolic_tensor(weight):
                return weight
        return None
    graph = tf.compat.v1.get_default_graph()
    enclosing = _graph_and_outer_graphs(graph)
    for weight in reversed(_stack()):
        if tf.is_symbolic_tensor(weight) and weight.graph in enclosing:
            return weight
    found = graph.get_collection(GRAPH_COLLECTION)
    return found[0] if found else None


def _graph_and_outer_graphs(graph: Any) -> List[Any]:
    # A tf.function traced inside another (or a while_loop body) is a
    # FuncGraph whose outer_graph is the enclosing graph; tensors of an
    # enclosing graph are captured automatically when used.
    graphs = []
    while graph is not None:
        graphs.append(graph)
        graph = getattr(graph, "outer_graph", None)
    return graphs
