"""Patches ``Model.__new__`` of Keras 3 and tf_keras while an hb.scope is
open.

Why: every Keras model CREATED inside hb.scope becomes data-parallel (its
class is swapped for the data-parallel subclass: step weights of data
sync, broadcast before the first ``fit`` step; hbcore_tf.scope passes
that step, hbcore_tf._parallel.data_parallel's ``make_data_parallel_model``).
``__new__`` runs before any subclass ``__init__``, so user models that
build layers in their constructor are covered. tf_keras's Model is
patched only when tf_keras is imported.

Installed: when the first hb.scope opens (hbcore_tf.scope). Undone: when
the last hb.scope closes.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 and
TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras 2.21.0
(internals.KERAS3_MODEL_NEW, TF_KERAS_MODEL_NEW).
"""
import sys
from typing import Any, Callable, List

from hbcore_tf._patches import internals, patch

_KERAS3 = patch.of(internals.KERAS3_MODEL_NEW)
_TF_KERAS = patch.of(internals.TF_KERAS_MODEL_NEW)


def _available() -> List[patch.Patch]:
    out = []
    if internals.loaded_or_none(internals.KERAS3_MODEL) is not None:
        out.append(_KERAS3)
    if "tf_keras" in sys.modules:
        out.append(_TF_KERAS)
    return out


def install(after_new: Callable[[Any], None]) -> None:
    """Makes ``Model.__new__`` call ``after_new(model)`` (idempotent).

    Args:
        after_new: called with every model created.
    """
    for one in _available():
        one.install(patch.calling_after_new(after_new))


def uninstall() -> None:
    """Restores both flavours' ``__new__``."""
    _KERAS3.uninstall()
    _TF_KERAS.uninstall()


def installed() -> bool:
    """Whether any of the patches is in place."""
    return _KERAS3.installed or _TF_KERAS.installed
