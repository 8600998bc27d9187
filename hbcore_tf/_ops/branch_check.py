"""A warning, once per collective, when one is created inside a branch
of a ``tf.cond`` (or ``tf.case`` / ``tf.switch_case``, autograph's ``if``
on a tensor, tf.compat.v1's cond) of a graph being built.

Why: every rank must run the same collectives. When the ranks take
different branches, the ones inside the taken branch wait for ranks that
will never submit them, and the job hangs (the stall warnings of the core
say so only after a minute, and only name the tensor). Where the
condition is the same on every rank (it was decided from reduced values,
or from a step counter) the branch is fine; hbcore's own such branches
(local gradient aggregation, a loss-scale decision taken on reduced
gradients) declare themselves with :class:`rank_uniform`, and are not
reported. So the warning names the op and the remedy at trace time, once.

Loop bodies (``tf.while_loop``) are not reported: the common one, Keras'
``steps_per_execution`` loop, runs the same number of steps on every rank.

The check reads the graph's class names only (``CondBranchFuncGraph``, a
``ControlFlowFuncGraph``, for TF2 control flow; ``CondContext`` for v1): no
private TensorFlow name is imported, and on a TensorFlow that renamed them
it warns less, never fails. It looks within the function being traced: a
branch around the call of another tf.function is the caller's.
"""
import threading
import warnings
from typing import Any, Optional, Set

_local = threading.local()
_warned: Set[str] = set()
_warned_lock = threading.Lock()


class rank_uniform:
    """Context: collectives created inside it sit in branches that every
    rank takes alike (no warning)."""

    def __enter__(self) -> "rank_uniform":
        _local.depth = getattr(_local, "depth", 0) + 1
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.depth -= 1


def _cond_branch(graph: Any) -> Optional[str]:
    """The name of the innermost cond branch ``graph`` is (or is inside,
    within the same function), None when it is in none.

    The walk stops at a function boundary: a tf.function called inside a
    branch is traced into a graph of its own, and the branch is the
    caller's choice (Keras 3 calls its train step in a branch on "is there
    another batch" when steps_per_execution > 1; the train step itself is
    what the warning is about)."""
    inner: Any = graph
    while inner is not None:
        kinds = {c.__name__ for c in type(inner).__mro__}
        if "CondBranchFuncGraph" in kinds:
            return str(inner.name)
        if "ControlFlowFuncGraph" not in kinds:
            break  # a function's own graph: the branches outside are not ours
        inner = getattr(inner, "outer_graph", None)
    get_context = getattr(graph, "_get_control_flow_context", None)
    context = get_context() if get_context is not None else None
    while context is not None:
        if type(context).__name__ == "CondContext":
            return str(getattr(context, "name", "cond"))
        context = getattr(context, "outer_context", None)
    return None


def check(graph: Any, op_name: str) -> None:
    """Warns (once per ``op_name`` per process) when a collective named
    ``op_name`` is being created in a cond branch of ``graph`` outside
    :class:`rank_uniform`.

    Args:
        graph: the graph the op is created in.
        op_name: the collective's core name.
    """
    if getattr(_local, "depth", 0):
        return
    branch = _cond_branch(graph)
    if branch is None:
        return
    with _warned_lock:
        if op_name in _warned:
            return
        _warned.add(op_name)
    warnings.warn(
        "hbcore: the collective %r is created inside a branch of a "
        "tf.cond (%s). If the ranks can take different branches, the ranks "
        "that take this one wait for the others forever. Decide the "
        "condition from values that are the same on every rank (e.g. "
        "allreduce it first), or move the collective out of the branch; "
        "a LossScaleOptimizer should hold hvd.DistributedOptimizer or be "
        "held by it (both are handled)." % (op_name, branch),
        RuntimeWarning, stacklevel=4)
