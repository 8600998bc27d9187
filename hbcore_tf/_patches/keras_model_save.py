"""Patches ``Model.save`` and ``Model.save_weights`` of Keras 3
(``keras.Model``) and of tf_keras (``tf_keras.Model``), and the
optimizers' ``save_own_variables`` / ``load_own_variables`` (Keras 3
``BaseOptimizer``, tf_keras ``Optimizer``) that those files store an
optimizer's state with.

Why: a model holding sharded embedding tables must be saved by all ranks
together (the tables are allgathered) while rank 0 alone writes the file;
before, each rank wrote the same file at once. An optimizer slot of a
sharded table holds this rank's rows only, and Keras stores optimizer
variables by value: rank 0's rows would be written as the slot, and loaded
on every rank. The embedding feature's Keras layer passes the wrappers
(hbcore_tf.keras.model_saving, hbcore_tf.keras.optimizer_saving). Models
and optimizers without sharded tables save exactly as before.

Installed: by the first sharded table layer that is built, for its Keras
flavour (hbcore_tf.keras.layers, hbcore_tf.keras.dynamic_embedding).
Undone: never in training (the model outlives any scope); ``uninstall``
is for tests.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 and
TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras 2.21.0
(internals.KERAS3_MODEL_SAVE*, KERAS3_OPTIMIZER_*_OWN_VARIABLES and their
TF_KERAS_ twins; the wrappers pass arguments through, so Keras 3's
changing keyword arguments need no variant).
"""
import functools
from typing import Any, Callable, Dict

from hbcore_tf._patches import internals, patch

_PATCHES: Dict[bool, tuple] = {
    False: (patch.of(internals.KERAS3_MODEL_SAVE),
            patch.of(internals.KERAS3_MODEL_SAVE_WEIGHTS),
            patch.of(internals.KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES),
            patch.of(internals.KERAS3_OPTIMIZER_LOAD_OWN_VARIABLES)),
    True: (patch.of(internals.TF_KERAS_MODEL_SAVE),
           patch.of(internals.TF_KERAS_MODEL_SAVE_WEIGHTS),
           patch.of(internals.TF_KERAS_OPTIMIZER_SAVE_OWN_VARIABLES),
           patch.of(internals.TF_KERAS_OPTIMIZER_LOAD_OWN_VARIABLES)),
}


def install(tf_keras: bool, save: Callable[..., Any],
            save_weights: Callable[..., Any],
            save_optimizer_state: Callable[..., Any],
            load_optimizer_state: Callable[..., Any]) -> None:
    """Installs the patches of one Keras flavour (idempotent).

    Args:
        tf_keras: patch tf_keras' classes (True) or Keras 3's (False).
        save: replaces ``Model.save``; called as ``save(original, model,
            filepath, *args, **kwargs)``.
        save_weights: replaces ``Model.save_weights``, called the same way.
        save_optimizer_state: replaces the optimizer's
            ``save_own_variables``; called as ``save_optimizer_state(
            original, optimizer, store)``.
        load_optimizer_state: replaces ``load_own_variables``, called the
            same way.
    """
    replacements = (save, save_weights, save_optimizer_state,
                    load_optimizer_state)
    for one, replacement in zip(_PATCHES[tf_keras], replacements):
        def make(original: Callable, replacement=replacement) -> Callable:
            @functools.wraps(original)
            def method(self, *args, **kwargs):
                return replacement(original, self, *args, **kwargs)
            return method
        one.install(make)


def uninstall() -> None:
    """Restores both flavours' methods."""
    for pair in _PATCHES.values():
        for one in pair:
            one.uninstall()


def installed(tf_keras: bool) -> bool:
    """Whether one flavour's patches are in place."""
    return _PATCHES[tf_keras][0].installed
