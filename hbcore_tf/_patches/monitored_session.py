"""Patches the public name ``tf.compat.v1.train.MonitoredTrainingSession``
while an hb.scope is open.

Why: HybridBackend's scope makes it hb.train.MonitoredTrainingSession
(broadcast after restore or initialisation, checkpoints and summaries on
rank 0). Only the attribute of ``tf.compat.v1.train`` is replaced, so a
reference taken before the scope stays TF's, and hb.train's function
builds on TF's own (internals.MONITORED_TRAINING_SESSION).

Installed: when the first hb.scope opens (hbcore_tf.scope). Undone: when
the last hb.scope closes.

Checked on: TensorFlow 2.16.2 and 2.21.0
(internals.PUBLIC_MONITORED_TRAINING_SESSION).
"""
import functools
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_PATCH = patch.of(internals.PUBLIC_MONITORED_TRAINING_SESSION)


def install(replacement: Callable[..., Any]) -> None:
    """Makes the public name call ``replacement`` (idempotent).

    Args:
        replacement: the function called instead, with the caller's
            arguments.
    """
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def monitored_training_session(*args: Any, **kwargs: Any) -> Any:
            return replacement(*args, **kwargs)
        return monitored_training_session

    _PATCH.install(make)


def uninstall() -> None:
    """Restores TF's function."""
    _PATCH.uninstall()


def installed() -> bool:
    """Whether the patch is in place."""
    return _PATCH.installed
