"""Patches Keras 3's ``LossScaleOptimizer.apply``
(keras.src.optimizers.loss_scale_optimizer).

Why: a LossScaleOptimizer checks the gradients it is given for Inf/NaN and
applies them with the optimizer it holds only inside ``cond(all
finite)``. When that optimizer is hbcore's DistributedOptimizer (the
user's ``LossScaleOptimizer(hvd.DistributedOptimizer(opt))``, or Keras'
``compile`` wrapping it under a ``mixed_float16`` policy), the gradient
allreduce sits inside the branch and each rank decides from its own,
unreduced gradients: a rank whose fp16 backward overflowed skips the
branch while the others wait in its allreduce forever (Horovod issue
#2989). Keras 3's LossScaleOptimizer has no hook before the check (tf_keras'
calls the inner optimizer's ``aggregate_gradients``, which hbcore
overrides instead), hence the patch; the optimizer layer passes what to do
(hbcore_tf._parallel.loss_scale: reduce first, then decide).

Installed: by the first Keras 3 DistributedOptimizer class made
(hbcore_tf._parallel.distributed_optimizer.distributed_keras_class), with
the XLA patch. Undone: never in training (a compiled model holds its
optimizer); ``uninstall`` is for tests. A LossScaleOptimizer whose inner
optimizer is not hbcore's runs Keras' own code unchanged.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 and TensorFlow 2.21.0 with
Keras 3.15.1 (internals.KERAS3_LOSS_SCALE_APPLY).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_PATCH = patch.of(internals.KERAS3_LOSS_SCALE_APPLY)

# apply(loss_scale_optimizer, keras_apply, grads, trainable_variables)
ApplyThrough = Callable[[Any, Callable, Any, Any], Any]


def install(apply_through: ApplyThrough) -> None:
    """Makes ``LossScaleOptimizer.apply(grads, trainable_variables)`` call
    ``apply_through(self, keras_apply, grads, trainable_variables)``
    (idempotent; no-op without Keras 3).

    Args:
        apply_through: hbcore's apply; ``keras_apply`` is Keras' own
            method, unbound.
    """
    if _PATCH.installed or not patch.optional_target_present(
            internals.KERAS3_LOSS_SCALE_APPLY,
            "cannot make Keras 3's LossScaleOptimizer reduce the gradients "
            "before its Inf/NaN check; wrap the other way round, "
            "hvd.DistributedOptimizer(LossScaleOptimizer(opt))"):
        return

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def apply(self: Any, grads: Any, trainable_variables: Any = None
                  ) -> Any:
            return apply_through(self, original, grads, trainable_variables)
        return apply

    _PATCH.install(make)


def uninstall() -> None:
    """Restores Keras' method."""
    _PATCH.uninstall()


def installed() -> bool:
    """Whether the patch is in place."""
    return _PATCH.installed
