"""Patches ``tf.compat.v1.train.Saver._build`` and ``Saver.save``.

Why: TF has no save in which several processes write one checkpoint. With
sharded embedding tables every rank holds only its rows, so the embedding
layer makes ``Saver.save`` collective (hbcore_tf.embedding.checkpoint_savers):
``_build`` gets a companion Saver of the rank's sharded state (built when
the user's Saver is built, because MonitoredTrainingSession finalizes the
graph right after), and ``save`` runs the collective save protocol.
Savers are usually built outside any hb.scope, so the patch is
process-wide.

Installed: by the first sharded table (embedding/sharding.py's sharding
getter, hb.keras.layers.ShardedEmbedding.build). Undone: never in
training (the tables outlive every scope); ``uninstall`` is for tests.
Both replacements fall through to TF's code for Savers without sharded
state.

Checked on: TensorFlow 2.16.2 and 2.21.0 (internals.SAVER_BUILD,
SAVER_SAVE).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_BUILD = patch.of(internals.SAVER_BUILD)
_SAVE = patch.of(internals.SAVER_SAVE)


def install(after_build: Callable[[Any], None],
            save: Callable[..., Any]) -> None:
    """Installs both patches (idempotent).

    Args:
        after_build: called with the Saver after TF's ``_build``.
        save: replaces ``Saver.save``; called as ``save(tf_save, saver,
            *args, **kwargs)`` with TF's own function first.
    """
    def make_build(original: Callable) -> Callable:
        @functools.wraps(original)
        def _build(self, *args, **kwargs):
            original(self, *args, **kwargs)
            after_build(self)
        return _build

    def make_save(original: Callable) -> Callable:
        @functools.wraps(original)
        def save_(self, *args, **kwargs):
            return save(original, self, *args, **kwargs)
        return save_

    _BUILD.install(make_build)
    _SAVE.install(make_save)


def uninstall() -> None:
    """Restores TF's ``_build`` and ``save``."""
    _SAVE.uninstall()
    _BUILD.uninstall()


def installed() -> bool:
    """Whether the patches are in place."""
    return _BUILD.installed
