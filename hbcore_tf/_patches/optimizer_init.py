"""Patches the optimizer base classes' ``__init__`` while an hb.scope is
open: tf.compat.v1 ``Optimizer``, Keras 3 ``BaseOptimizer``, tf_keras
``_BaseOptimizer`` and legacy ``OptimizerV2``.

Why: every optimizer CREATED inside hb.scope becomes data-parallel (its
class is swapped for the data-parallel subclass when the constructor
returns; hbcore_tf.scope passes that step, hbcore_tf._parallel.data_parallel's
``make_data_parallel``). tf_keras bases are patched only when tf_keras is
imported (the scope imports it when TF_USE_LEGACY_KERAS asks for it).

Installed: when the first hb.scope opens (hbcore_tf.scope). Undone: when
the last hb.scope closes.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 and
TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras 2.21.0
(internals.V1_OPTIMIZER_INIT: TF 2.17 added a parameter, the wrapper
passes arguments through; KERAS3_OPTIMIZER_INIT, TF_KERAS_OPTIMIZER_*).
"""
import sys
from typing import Any, Callable, List

from hbcore_tf._patches import internals, patch

_V1 = patch.of(internals.V1_OPTIMIZER_INIT)
_KERAS3 = patch.of(internals.KERAS3_OPTIMIZER_INIT)
_TF_KERAS = [patch.of(internals.TF_KERAS_OPTIMIZER_INIT),
             patch.of(internals.TF_KERAS_OPTIMIZER_V2_INIT)]


def _available() -> List[patch.Patch]:
    out = [_V1]
    if internals.loaded_or_none(internals.KERAS3_BASE_OPTIMIZER) is not None:
        out.append(_KERAS3)
    if "tf_keras" in sys.modules:
        out += _TF_KERAS
    return out


def install(after_init: Callable[[Any], None]) -> None:
    """Makes each base's ``__init__`` call ``after_init(optimizer)`` when
    it returns (idempotent).

    Args:
        after_init: called with every optimizer created.
    """
    for one in _available():
        one.install(patch.calling_after(after_init))


def uninstall() -> None:
    """Restores every constructor."""
    for one in [_V1, _KERAS3] + _TF_KERAS:
        one.uninstall()


def installed() -> bool:
    """Whether the patches are in place."""
    return _V1.installed
