"""Patches Keras 3's ``model_supports_jit`` (keras.src.trainers.trainer).

Why: Keras 3 compiles a model's train step with XLA when the model
supports it (``jit_compile="auto"`` on hosts with a GPU, or ``True``).
hbcore's collectives have no XLA kernel, so a model whose optimizer
reduces through hbcore must answer "no": "auto" then picks no XLA and
an explicit True falls back with Keras' own warning. Keras asks only the
model (its layers' ``supports_jit``), never the optimizer, hence the
patch; the optimizer layer passes the test (hbcore_tf.keras_xla rules:
``uses_hbcore_optimizer``).

Installed: by the first Keras 3 DistributedOptimizer class made
(hbcore_tf._parallel.distributed_optimizer.distributed_keras_class). Undone: never in training
(the compiled model outlives any scope); ``uninstall`` is for tests. If a
Keras 3 lacks the function, ``install`` warns (the XLA fallback is then
lost: such a model fails at its first step unless compiled with
``jit_compile=False``) and the check (python -m hbcore_tf._patches.check)
fails.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 and TensorFlow 2.21.0 with
Keras 3.15.1 (internals.KERAS3_MODEL_SUPPORTS_JIT).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_PATCH = patch.of(internals.KERAS3_MODEL_SUPPORTS_JIT)


def install(refuses_jit: Callable[[Any], bool]) -> None:
    """Makes ``model_supports_jit(model)`` False when
    ``refuses_jit(model)``, Keras' answer otherwise (idempotent; no-op
    without Keras 3).

    Args:
        refuses_jit: whether a model must not be compiled with XLA.
    """
    if _PATCH.installed or not patch.optional_target_present(
            internals.KERAS3_MODEL_SUPPORTS_JIT,
            "cannot make Keras 3 models with hbcore's DistributedOptimizer "
            "compile without XLA; compile them with jit_compile=False"):
        return

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def model_supports_jit(model: Any) -> bool:
            if refuses_jit(model):
                return False
            return original(model)
        return model_supports_jit

    _PATCH.install(make)


def uninstall() -> None:
    """Restores Keras' function."""
    _PATCH.uninstall()


def installed() -> bool:
    """Whether the patch is in place."""
    return _PATCH.installed
