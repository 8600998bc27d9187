"""Mixed precision: every rank takes the same skip-or-apply decision.

A loss-scale optimizer skips a step (and halves its scale) when the
gradients it checks hold an Inf or NaN, and applies them otherwise. With
hbcore the ranks must decide alike, or the ones that apply wait in a
collective the others never join (Horovod issue #2989), or the weights and
loss scales of the ranks part. The rule: **the decision is taken on
reduced gradients**, which are the same on every rank
(hbcore_tf._parallel.non_finite extends that to the gradients hbcore does
not allreduce). How each way of writing it gets there:

- ``hvd.DistributedOptimizer(LossScaleOptimizer(opt))`` (any Keras) and
  ``DistributedGradientTape`` + a loss-scale optimizer: the gradients are
  reduced before the loss-scale optimizer sees them; nothing to do.
- Keras 3 ``LossScaleOptimizer(hvd.DistributedOptimizer(opt))``, also the
  one ``compile`` adds under a ``mixed_float16`` policy: Keras checks the
  local gradients, then calls the inner optimizer inside the branch.
  :func:`apply_through` (installed as ``LossScaleOptimizer.apply``,
  hbcore_tf._patches.keras_loss_scale) reduces them first with the inner
  optimizer's reducer and lets Keras decide on the result; the inner
  optimizer then applies them without reducing again.
- tf_keras' LossScaleOptimizer (current and legacy) calls the inner
  optimizer's ``aggregate_gradients`` before its check, which hbcore's
  optimizer implements as the reduction
  (hbcore_tf._parallel.distributed_optimizer).
- tf.compat.v1's MixedPrecisionLossScaleOptimizer checks what
  ``compute_gradients`` returned, which hbcore's v1 optimizer reduces,
  whichever wraps which.
- With ``backward_passes_per_step`` > 1 the gradients of a pass are not
  reduced; there the ranks agree explicitly (:func:`agree_non_finite`:
  one scalar allreduce) and the branch, which aggregates and reduces
  every N-th pass, is taken by every rank alike.
"""
from typing import Any, Callable, List, Optional, Sequence

from hbcore_tf._ops import branch_check
from hbcore_tf._parallel import non_finite as _non_finite
from hbcore_tf._patches import keras_loss_scale


def runtime_of(optimizer: Any) -> Optional[Any]:
    """The hbcore state of a DistributedOptimizer (None for any other
    optimizer)."""
    return getattr(optimizer, "_hb_runtime", None)


def agree_non_finite(runtime: Any, grads: Sequence[Any]) -> List[Any]:
    """``grads`` as computed, NaN on every rank of the reducer's process set
    when any member's hold an Inf or NaN.

    Args:
        runtime: the DistributedOptimizer's state (reducer, aggregator).
        grads: one pass's local gradients (None entries kept).

    Returns:
        The gradients, poisoned alike on every rank where any was
        non-finite.
    """
    grads = list(grads)
    checked = [i for i, g in enumerate(grads) if g is not None]
    if not checked or not runtime.reducer.member():
        return grads
    return _non_finite.propagate(grads, checked, runtime.reducer.process_set,
                                 runtime.reducer.name + "_LossScale")


def apply_through(optimizer: Any, keras_apply: Callable, grads: Any,
                  trainable_variables: Any = None) -> Any:
    """Keras 3's ``LossScaleOptimizer.apply``, deciding on reduced
    gradients when the optimizer it holds is hbcore's.

    Args:
        optimizer: the LossScaleOptimizer.
        keras_apply: Keras' own ``LossScaleOptimizer.apply`` (unbound).
        grads: the step's (scaled) gradients.
        trainable_variables: as Keras' apply.

    Returns:
        What Keras' apply returns.
    """
    runtime = runtime_of(getattr(optimizer, "inner_optimizer", None))
    if runtime is None:
        return keras_apply(optimizer, grads, trainable_variables)
    grads = list(grads)
    if trainable_variables is not None:
        variables = list(trainable_variables)
    elif optimizer.built:
        variables = list(optimizer._trainable_variables)
    else:
        # Keras raises its own error for an unbuilt optimizer without
        # variables.
        return keras_apply(optimizer, grads, trainable_variables)
    if runtime.aggregator is not None:
        agreed = agree_non_finite(runtime, grads)
        # Every rank takes the same branch now; the inner optimizer's
        # aggregation (and its every-N-th-pass reduction) runs inside it.
        with branch_check.rank_uniform():
            return keras_apply(optimizer, agreed, trainable_variables)
    reduced = runtime.reducer.reduce(grads, variables)
    runtime.reduced_upstream += 1
    try:
        return keras_apply(optimizer, reduced, trainable_variables)
    finally:
        runtime.reduced_upstream -= 1


def install() -> None:
    """Installs :func:`apply_through` as Keras 3's
    ``LossScaleOptimizer.apply`` (idempotent; no-op without Keras 3)."""
    keras_loss_scale.install(apply_through)
