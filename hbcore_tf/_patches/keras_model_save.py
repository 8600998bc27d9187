"""Patches ``Model.save`` and ``Model.save_weights`` of Keras 3
(``keras.Model``) and of tf_keras (``tf_keras.Model``).

Why: a model holding sharded embedding tables must be saved by all ranks
together (the tables are allgathered) while rank 0 alone writes the file;
before, each rank wrote the same file at once. The embedding feature's
Keras layer passes the wrappers (hbcore_tf.keras.model_saving). Models
without sharded tables save exactly as before.

Installed: by the first sharded ShardedEmbedding that is built, for its
Keras flavour (hbcore_tf.keras.layers). Undone: never in training (the
model outlives any scope); ``uninstall`` is for tests.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 and
TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras 2.21.0
(internals.KERAS3_MODEL_SAVE*, TF_KERAS_MODEL_SAVE*; the wrappers pass
arguments through, so Keras 3's changing keyword arguments need no
variant).
"""
import functools
from typing import Any, Callable, Dict

from hbcore_tf._patches import internals, patch

_PATCHES: Dict[bool, tuple] = {
    False: (patch.of(internals.KERAS3_MODEL_SAVE),
            patch.of(internals.KERAS3_MODEL_SAVE_WEIGHTS)),
    True: (patch.of(internals.TF_KERAS_MODEL_SAVE),
           patch.of(internals.TF_KERAS_MODEL_SAVE_WEIGHTS)),
}


def install(tf_keras: bool, save: Callable[..., Any],
            save_weights: Callable[..., Any]) -> None:
    """Installs the patches of one Keras flavour (idempotent).

    Args:
        tf_keras: patch tf_keras' Model (True) or Keras 3's (False).
        save: replaces ``save``; called as ``save(original, model,
            filepath, *args, **kwargs)``.
        save_weights: replaces ``save_weights``, called the same way.
    """
    for one, replacement in zip(_PATCHES[tf_keras], (save, save_weights)):
        def make(original: Callable, replacement=replacement) -> Callable:
            @functools.wraps(original)
            def method(self, filepath, *args, **kwargs):
                return replacement(original, self, filepath, *args, **kwargs)
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
