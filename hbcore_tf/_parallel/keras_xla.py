"""Keras 3 models whose optimizer is hbcore's compile without XLA.

Keras 3 compiles a model's train step with XLA when the model supports it:
``jit_compile="auto"`` (the default) does so on hosts with a GPU, and
``jit_compile=True`` asks for it anywhere. hbcore's collectives have no
XLA kernel, so a train step that allreduces its gradients through them
cannot be compiled with XLA: it failed at the first step, telling the user
to pass ``jit_compile=False``. A Horovod user's ``model.compile(optimizer=
hvd.DistributedOptimizer(...))`` should run as written.

Keras decides with one function, ``model_supports_jit(model)`` (its layers
answer through ``supports_jit``; SyncBatchNormalization says no). The
optimizer is not asked, so :func:`install` wraps that function, once per
process (the patch is hbcore_tf._patches.keras_jit): a model whose optimizer (or a LossScaleOptimizer's inner
optimizer) is distributed by hbcore does not support XLA, so "auto" picks
no XLA and an explicit True falls back with Keras' own warning ("Model
doesn't support `jit_compile=True`"). Every other model gets Keras' answer.
Keras sets ``model.optimizer`` before it resolves ``jit_compile`` in
``compile()``, so the answer is known in time.
"""
from typing import Any

from hbcore_tf._patches import keras_jit


def uses_hbcore_optimizer(model: Any) -> bool:
    """Whether ``model.optimizer`` (or the optimizer a loss-scale wrapper
    holds) reduces its gradients through hbcore."""
    optimizer = getattr(model, "optimizer", None)
    for _ in range(4):  # wrappers of wrappers, bounded
        if optimizer is None:
            return False
        if hasattr(optimizer, "_hb_runtime"):
            return True
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return False


def install() -> None:
    """Makes Keras 3's ``model_supports_jit`` answer False for models
    using hbcore's optimizer (hbcore_tf._patches.keras_jit; idempotent,
    a no-op without Keras 3, a warning when Keras renamed the function)."""
    keras_jit.install(uses_hbcore_optimizer)
