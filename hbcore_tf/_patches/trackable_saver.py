"""Patches ``TrackableSaver.save``, tf.train.Checkpoint's writer
(tensorflow.python.checkpoint.checkpoint).

Why: as for ``Saver.save`` (_patches/saver.py): a tf.train.Checkpoint
holding sharded tables (eager, also tf_keras' TensorFlow-format
``save_weights``) must be written by all ranks together; the embedding
layer passes the collective save (hbcore_tf.embedding.checkpoint_savers).

Installed: with the Saver patches, by the first sharded table. Undone:
never in training; ``uninstall`` is for tests. The replacement falls
through to TF's code when no sharded table is among the objects saved.

Checked on: TensorFlow 2.16.2 and 2.21.0 (internals.TRACKABLE_SAVER_SAVE).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_SAVE = patch.of(internals.TRACKABLE_SAVER_SAVE)


def install(save: Callable[..., Any]) -> None:
    """Installs the patch (idempotent).

    Args:
        save: replaces ``TrackableSaver.save``; called as ``save(tf_save,
            trackable_saver, *args, **kwargs)``.
    """
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def save_(self, *args, **kwargs):
            return save(original, self, *args, **kwargs)
        return save_

    _SAVE.install(make)


def uninstall() -> None:
    """Restores TF's ``TrackableSaver.save``."""
    _SAVE.uninstall()


def installed() -> bool:
    """Whether the patch is in place."""
    return _SAVE.installed
