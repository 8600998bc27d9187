"""Patches ``tf.compat.v1.train.Saver.__init__`` while an hb.scope is open.

Why: as HybridBackend's scope makes it, a Saver created inside
``hb.scope`` defaults ``save_relative_paths`` to True (a checkpoint
directory can then be moved) and ``max_to_keep`` /
``keep_checkpoint_every_n_hours`` to the options of those names when
they are set (hbcore_tf.scope passes the defaults). An argument the
caller gives, by name or by position, wins.

Installed: when the first hb.scope opens (hbcore_tf.scope). Undone: when
the last hb.scope closes.

Checked on: TensorFlow 2.16.2 and 2.21.0 (internals.SAVER_INIT).
"""
import functools
import inspect
from typing import Any, Callable, Dict, Optional

from hbcore_tf._patches import internals, patch

_PATCH = patch.of(internals.SAVER_INIT)


def install(defaults: Callable[[], Dict[str, Optional[Any]]]) -> None:
    """Makes ``Saver(...)`` take ``defaults()`` for arguments the caller
    left out (a None value: TF's default). Idempotent.

    Args:
        defaults: argument name -> default, read at each construction.
    """
    def make(original: Callable) -> Callable:
        # Each argument's place among Saver's positional arguments (less
        # self), so that one given by position is not given twice.
        names = list(inspect.signature(original).parameters)[1:]

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            for name, value in defaults().items():
                if value is not None and len(args) <= names.index(name):
                    kwargs.setdefault(name, value)
            original(self, *args, **kwargs)
        return __init__

    _PATCH.install(make)


def uninstall() -> None:
    """Restores TF's constructor."""
    _PATCH.uninstall()


def installed() -> bool:
    """Whether the patch is in place."""
    return _PATCH.installed
