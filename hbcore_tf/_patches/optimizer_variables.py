"""Patches the ``variables`` property of the Keras optimizer bases (Keras
3 ``BaseOptimizer``, tf_keras ``_BaseOptimizer``) so that its list is
also callable, returning itself.

Why: smddp's TF2 example calls ``opt.variables()``, a method of the TF 2.3
Keras optimizers; current Keras optimizers have a property. With the
patch such scripts run unchanged (``hbcore_tf.smddp``). Nothing else about
the optimizers changes; legacy tf_keras optimizers (``OptimizerV2``)
still have the method.

Installed: by ``hbcore_tf.smddp.init()`` (every smddp script calls it
before it builds its optimizer), for the Keras ``tf.keras`` resolves to.
Undone: never in training; ``uninstall`` is for tests.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 and
TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras 2.21.0
(internals.KERAS3_OPTIMIZER_VARIABLES, TF_KERAS_OPTIMIZER_VARIABLES).
"""
from typing import Any, Callable, Dict

from hbcore_tf._patches import internals, patch


class CallableList(list):
    """A list that returns itself when called: ``opt.variables()``."""

    def __call__(self) -> "CallableList":
        return self


_PATCHES: Dict[bool, patch.Patch] = {
    False: patch.of(internals.KERAS3_OPTIMIZER_VARIABLES),
    True: patch.of(internals.TF_KERAS_OPTIMIZER_VARIABLES),
}


def _callable_list_property(prop: property) -> property:
    def getter(self: Any, _fget: Callable = prop.fget) -> CallableList:
        return CallableList(_fget(self))
    return property(getter, prop.fset, prop.fdel, prop.__doc__)


def install(tf_keras: bool) -> None:
    """Makes one flavour's ``optimizer.variables`` callable (idempotent).

    Args:
        tf_keras: tf_keras' optimizers (True) or Keras 3's (False).
    """
    _PATCHES[tf_keras].install(_callable_list_property)


def uninstall() -> None:
    """Restores the properties."""
    for one in _PATCHES.values():
        one.uninstall()


def installed(tf_keras: bool) -> bool:
    """Whether one flavour's patch is in place."""
    return _PATCHES[tf_keras].installed
