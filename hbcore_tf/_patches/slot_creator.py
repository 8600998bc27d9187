"""Patches ``slot_creator.create_slot``, ``create_slot_with_initializer``
and ``create_zeros_slot`` (tensorflow.python.training.slot_creator).

Why: tf.compat.v1 optimizers create a slot through these functions (and
``get_variable``, so through the sharding getter when the optimizer is
built inside a sharding scope). A slot of a sharded table must hold this
rank's rows of the table's slot, created as a shard (not sharded again,
not broadcast from rank 0). The embedding layer passes the wrapper
(hbcore_tf.embedding.sharding).

Installed: by the first sharded table made with ``get_variable``
(embedding/sharding.py's sharding getter). Undone: never in training (the
table and its optimizer outlive the scope); ``uninstall`` is for tests.
The wrapper changes nothing for other variables.

Checked on: TensorFlow 2.16.2 and 2.21.0 (internals.SLOT_CREATE_*).
"""
from typing import Any, Callable

from hbcore_tf._patches import internals, patch

_PATCHES = [patch.of(entry) for entry in (
    internals.SLOT_CREATE_SLOT, internals.SLOT_CREATE_SLOT_WITH_INITIALIZER,
    internals.SLOT_CREATE_ZEROS_SLOT)]


def install(wrap: Callable[[Callable], Callable]) -> None:
    """Replaces each function by ``wrap(original)`` (idempotent).

    Args:
        wrap: builds the replacement of one slot-creating function.
    """
    for one in _PATCHES:
        one.install(wrap)


def uninstall() -> None:
    """Restores TF's functions."""
    for one in _PATCHES:
        one.uninstall()


def installed() -> bool:
    """Whether the patches are in place."""
    return all(one.installed for one in _PATCHES)
