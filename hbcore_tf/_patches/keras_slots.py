"""Patches the Keras optimizer methods that create a slot from a model
variable: Keras 3 ``BaseOptimizer.add_variable_from_reference``, tf_keras
``_BaseOptimizer.add_variable_from_reference`` and legacy
``OptimizerV2.add_slot``.

Why: a slot of a sharded table holds this rank's rows of the table's
slot: it must be created as a shard (no initial-value broadcast from rank
0, whose shape differs) and tagged ``<table>/<slot>`` so broadcasts and
checkpoints treat it as the table (hbcore_tf._base.compat passes the wrapper).

Installed: by the first sharded Keras table that is built
(hb.keras.layers.ShardedEmbedding.build) and by the first sharded
``get_variable`` table; each later call also covers a tf_keras imported
since (tf_keras is never imported for this). Undone: never in training
(the layer outlives any scope); ``uninstall`` is for tests. The wrapper
changes nothing for other variables.

Checked on: TensorFlow 2.16.2 with Keras 3.0.0 / tf_keras 2.16.0 (Keras
3.0's method has no ``initializer`` parameter; the wrapper passes
arguments through) and TensorFlow 2.21.0 with Keras 3.15.1 / tf_keras
2.21.0 (internals.KERAS3_ADD_VARIABLE_FROM_REFERENCE, TF_KERAS_*).
"""
import functools
import sys
from typing import Any, Callable, List

from hbcore_tf._patches import internals, patch

_KERAS3 = [patch.of(internals.KERAS3_ADD_VARIABLE_FROM_REFERENCE)]
_TF_KERAS = [patch.of(internals.TF_KERAS_ADD_VARIABLE_FROM_REFERENCE),
             patch.of(internals.TF_KERAS_ADD_SLOT)]


def _available() -> List[patch.Patch]:
    """Keras 3's patch when Keras 3 is installed; tf_keras's when
    something imported tf_keras already."""
    out = []
    if internals.loaded_or_none(internals.KERAS3_BASE_OPTIMIZER) is not None:
        out += _KERAS3
    if "tf_keras" in sys.modules:
        out += _TF_KERAS
    return out


def install(create_slot: Callable[..., Any]) -> None:
    """Installs the patches of the Keras flavours present (idempotent; a
    later call adds a tf_keras imported since).

    Args:
        create_slot: replaces each method; called as
            ``create_slot(original, optimizer, reference, *args,
            **kwargs)``.
    """
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def create(self, reference, *args, **kwargs):
            return create_slot(original, self, reference, *args, **kwargs)
        return create

    for one in _available():
        one.install(make)


def uninstall() -> None:
    """Restores every Keras method."""
    for one in _KERAS3 + _TF_KERAS:
        one.uninstall()


def installed() -> bool:
    """Whether any of the patches is in place."""
    return any(one.installed for one in _KERAS3 + _TF_KERAS)
