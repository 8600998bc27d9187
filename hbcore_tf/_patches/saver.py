"""Patches ``tf.compat.v1.train.Saver._build``, ``Saver.save`` and
``Saver.restore``.

Why: TF has no save in which several processes write one checkpoint. With
sharded embedding tables every rank holds only its rows, so the embedding
layer makes ``Saver.save`` collective (hbcore_tf.embedding.checkpoint_savers):
``_build`` gets a companion Saver of the rank's sharded state (built when
the user's Saver is built, because MonitoredTrainingSession finalizes the
graph right after), and ``save`` runs the collective save protocol.
Dynamic tables are taken out of the Saver's variables before TF's
``_build`` and saved and restored by key beside TF's own ops
(hbcore_tf.embedding.dynamic_saver): ``restore`` runs those after TF's.
Savers are usually built outside any hb.scope, so the patch is
process-wide.

Installed: by the first sharded table (embedding/sharding.py's sharding
getter, hb.keras.layers.ShardedEmbedding.build). Undone: never in
training (the tables outlive every scope); ``uninstall`` is for tests.
Every replacement falls through to TF's code for Savers without sharded
state.

Checked on: TensorFlow 2.16.2 and 2.21.0 (internals.SAVER_BUILD,
SAVER_SAVE, SAVER_RESTORE).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_BUILD = patch.of(internals.SAVER_BUILD)
_SAVE = patch.of(internals.SAVER_SAVE)
_RESTORE = patch.of(internals.SAVER_RESTORE)


def install(before_build: Callable[[Any], None],
            after_build: Callable[[Any], None],
            save: Callable[..., Any], restore: Callable[..., Any]) -> None:
    """Installs the patches (idempotent).

    Args:
        before_build: called with the Saver before TF's ``_build``.
        after_build: called with the Saver after TF's ``_build``.
        save: replaces ``Saver.save``; called as ``save(tf_save, saver,
            *args, **kwargs)`` with TF's own function first.
        restore: replaces ``Saver.restore``, called as ``save`` is.
    """
    def make_build(original: Callable) -> Callable:
        @functools.wraps(original)
        def _build(self, *args, **kwargs):
            before_build(self)
            original(self, *args, **kwargs)
            after_build(self)
        return _build

    def make_restore(original: Callable) -> Callable:
        @functools.wraps(original)
        def restore_(self, *args, **kwargs):
            return restore(original, self, *args, **kwargs)
        return restore_

    def make_save(original: Callable) -> Callable:
        @functools.wraps(original)
        def save_(self, *args, **kwargs):
            return save(original, self, *args, **kwargs)
        return save_

    _BUILD.install(make_build)
    _SAVE.install(make_save)
    _RESTORE.install(make_restore)


def uninstall() -> None:
    """Restores TF's ``_build``, ``save`` and ``restore``."""
    _RESTORE.uninstall()
    _SAVE.uninstall()
    _BUILD.uninstall()


def installed() -> bool:
    """Whether the patches are in place."""
    return _BUILD.installed
