"""Adds hbcore's collective ops to TensorFlow's
``auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS``.

Why: hbcore's collective ops are stateful (they must run), and
tf.function's automatic control dependencies chain all stateful ops in
program order. Chained, 50 allreduces in one function would reach the
core one after another (50 negotiations, no fusion), and two functions
issuing collectives in different orders could deadlock. TF's set of
"must run, order insensitive" stateful ops gives exactly the wanted
semantics: always executed, not ordered (data dependencies still order
them). The set is private; without it the ops stay correct, only
serialized.

Installed: when hbcore's op library is loaded (hbcore_tf.mpi_ops, before
any of its ops can be built), since every function tracing a collective
needs it; it changes nothing for ops other than hbcore's. Undone: never
(``uninstall`` is for tests).

Checked on: TensorFlow 2.16.2 and 2.21.0
(internals.UNORDERED_STATEFUL_OPS; a frozenset in both).
"""
from typing import Iterable

from hbcore_tf._patches import internals, patch

_PATCH = patch.of(internals.UNORDERED_STATEFUL_OPS)


def install(op_types: Iterable[str]) -> None:
    """Adds ``op_types`` to the set (idempotent; no-op on a TF without it).

    Args:
        op_types: op type names (hbcore's collective ops).
    """
    try:
        internals.UNORDERED_STATEFUL_OPS.load()
    except internals.InternalMissing:  # pragma: no cover - other TF layouts
        return  # the check reports it; the ops then run serialized
    op_types = frozenset(op_types)
    _PATCH.install(lambda current: frozenset(current) | op_types)


def uninstall() -> None:
    """Restores TF's set."""
    _PATCH.uninstall()


def installed() -> bool:
    """Whether hbcore's ops are in the set."""
    return _PATCH.installed
