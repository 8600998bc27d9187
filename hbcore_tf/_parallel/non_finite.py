"""A non-finite gradient on one rank becomes one on every rank.

Why: a loss-scale optimizer (Keras 3's and tf_keras' ``LossScaleOptimizer``,
tf.compat.v1's ``MixedPrecisionLossScaleOptimizer``) looks at the gradients
it is given, skips the step and halves its loss scale when one holds an Inf
or a NaN, and otherwise applies them. Every rank decides in its own
process, so the ranks stay identical only if they all see non-finite
gradients on the same steps.

For the gradients hbcore allreduces that holds by construction: an Inf or
NaN on any rank makes the sum non-finite on every rank. Two kinds of
gradients are not allreduced: a sharded table's (each rank holds the rows
it owns, already summed by the lookup's exchange) and those of variables
registered as local to a rank (``register_local_var``). One rank's fp16
overflow in them would be seen by that rank alone: it would skip a step
the others take, and the ranks' weights and loss scales would part for
good.

The invariant, kept by :func:`propagate` wherever hbcore reduces a step's
gradients (hbcore_tf._parallel.gradient_reduction): **after the reduction,
either every rank's gradients are all finite or every rank's hold a
NaN.** Each rank counts the non-finite values in the gradients it did not
allreduce; one scalar Sum allreduce adds the counts over the process set
(it is ready as soon as the backward pass is, so the core usually fuses it
with the gradients' own collective); where the total is not zero, every
rank sets one dense gradient, the same position on every rank, to NaN.

Which collectives are issued depends only on the variables (sharded or
local, the same on every rank), never on the data.
"""
from typing import Any, List, Optional, Sequence

import tensorflow as tf

from hbcore_tf.mpi_ops import Sum, allreduce


def _values(grad: Any) -> tf.Tensor:
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def count_non_finite(grads: Sequence[Any]) -> tf.Tensor:
    """The number of Inf and NaN values in ``grads`` (None entries are
    skipped), as a float32 scalar.

    Args:
        grads: tensors or tf.IndexedSlices (their values are counted).
    """
    counts = [tf.reduce_sum(tf.cast(tf.logical_not(tf.math.is_finite(
        _values(g))), tf.float32)) for g in grads if g is not None]
    if not counts:
        return tf.constant(0.0)
    return tf.add_n(counts)


def _poison_position(grads: Sequence[Any]) -> Optional[int]:
    """The gradient to set to NaN: the dense one with the fewest elements
    (statically known sizes; ties: the first), the same on every rank
    because every rank has the same variables. None when no gradient is
    a dense tensor."""
    best, best_size = None, None
    for i, grad in enumerate(grads):
        if grad is None or isinstance(grad, tf.IndexedSlices):
            continue
        n = tf.TensorShape(grad.shape).num_elements()
        size = float("inf") if n is None else n
        if best is None or size < best_size:
            best, best_size = i, size
    return best


def _poisoned(grad: Any, bad: tf.Tensor) -> Any:
    """``grad`` where ``bad`` is False, NaN everywhere where it is True."""
    values = _values(grad)
    nan = tf.cast(float("nan"), values.dtype)
    values = tf.where(bad, tf.fill(tf.shape(values), nan), values)
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
    return values


def propagate(grads: Sequence[Any], checked: Sequence[int],
              process_set: Any, name: str) -> List[Any]:
    """Makes a non-finite value in ``grads[i]`` (``i`` in ``checked``) on
    any rank of ``process_set`` a NaN in the gradients of every rank.

    Every member must call it with the same ``checked`` positions and the
    same None pattern (one scalar allreduce named after ``name``).

    Args:
        grads: one step's gradients (tensors, tf.IndexedSlices or None).
        checked: positions of the gradients that were not allreduced.
        process_set: the ranks that take the same decision.
        name: prefix of the collective's name.

    Returns:
        ``grads``, with one dense gradient (or, in a step without dense
        gradients, every sparse one's values) NaN where any rank had a
        non-finite value in a checked gradient.
    """
    out = list(grads)
    total = allreduce(count_non_finite([out[i] for i in checked]), op=Sum,
                      name=name + "_NonFinite", process_set=process_set)
    bad = tf.greater(total, 0.0)
    target = _poison_position(out)
    # Without a dense gradient every sparse one is poisoned; a rank whose
    # sparse gradients hold no rows this step cannot be told (a model
    # without any dense weight is the only such case).
    targets = ([target] if target is not None
               else [i for i, g in enumerate(out) if g is not None])
    for i in targets:
        out[i] = _poisoned(out[i], bad)
    return out
