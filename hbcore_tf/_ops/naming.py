"""Tensor names for the core, which matches tensors across ranks by name.

Graph mode (tf.compat.v1 graphs, and tf.function / control-flow graphs
while they are traced): every collective op is created inside a fresh,
graph-unique name scope: the user's name, else the op kind
(``outer/HbcoreAllreduce``, then ``outer/HbcoreAllreduce_1``, ...). The
same program creates the same collectives in the same scopes on every
rank, so the name is the same on every rank and on every run of the graph
(which lets the core's response cache answer the negotiation).

Unlike Horovod, the default name does not include the input tensor's
name: that name depends on ops TensorFlow chooses per rank. For example
the gradient of ``y * w`` ends in ``Mul`` on a rank where the shapes are
statically equal and in ``Reshape`` on a rank where they are not (an
alltoall or allgather output has a rank-dependent row count), which would
give the gradient's collective a different name on each rank. The scope
counter depends only on how many collectives were created before in that
scope, which is the same on every rank.

Names inside a tf.function's graph are unique only within that graph, so
two functions could otherwise produce the same name. The name is therefore
prefixed with the path of FuncGraph names from the outermost function in
(``train_step:HbcoreAllreduce_x``; inside a tf.cond branch
``train_step/cond_true:...``). TensorFlow names some FuncGraphs with a
process-wide counter (cond/while branches ``cond_true_36``, backward
functions ``__backward_f_123``); that counter differs across ranks that
traced different things before, so a trailing ``_<digits>`` is stripped
from every FuncGraph name. (Plain tf.function graphs are named after the
Python function, e.g. ``train_step``, and carry no counter.)

Eager mode has no graph to name ops by. An unnamed eager collective
runs to completion inside the call that creates it (synchronous eager
execution), so it needs a name unique only among the unnamed collectives
of its kind in flight at that moment: the call takes the lowest free slot
``<kind>.eager.<slot>`` and frees it when the op returned. Calls made one
after another therefore reuse one name, which the core's response cache
then answers without a full negotiation (with a fresh name per call, every
eager collective was a cache miss). Concurrent calls from several threads
get distinct slots. Like Horovod, this requires every rank to issue its
unnamed eager collectives in the same order. Under asynchronous eager
execution an op may still run after the call returned, so there the name
comes from a per-kind counter (``<kind>.noname.<n>``) instead.
"""
import re
import threading
from typing import Any, Dict, Optional, Set

import tensorflow as tf

from hbcore.ops import auto_name
from hbcore_tf._ops import branch_check as _branch_check

_NOT_SCOPE_CHAR = re.compile(r"[^A-Za-z0-9_.\-]")
_COUNTER_SUFFIX = re.compile(r"_\d+$")



def _scope_base(name: str) -> str:
    # A user-given name becomes a name scope; TF rejects some characters
    # there (and a leading '_' or '-'), and a '/' would open nested scopes.
    base = _NOT_SCOPE_CHAR.sub("_", name)
    if not base or not (base[0].isalnum() or base[0] == "."):
        base = "n" + base
    return base


def _eager_is_async() -> bool:
    # TF's public face of its eager context's is_async().
    return not tf.config.experimental.get_synchronous_execution()


def graph_path(graph: Any) -> str:
    """'/'-joined FuncGraph names from the outermost function to ``graph``,
    counters stripped; '' for a plain tf.Graph."""
    parts = []
    # FuncGraphs (tf.function, cond/while branches, backward functions)
    # know the graph they were created in; a plain tf.Graph does not.
    while graph is not None and hasattr(graph, "outer_graph"):
        parts.append(_COUNTER_SUFFIX.sub("", str(graph.name)))
        graph = graph.outer_graph
    return "/".join(reversed(parts))


class op_scope:
    """``with op_scope(...) as name:`` gives the core name of one collective
    op; in graph mode the op is to be created inside the context (a unique
    name scope). A class, not a generator: an eager collective enters one
    per call, and a generator-based context costs microseconds.

    Args:
        kind: op kind, e.g. 'HbcoreAllreduce' (default name prefix).
        name: user-given name or None.
        ignore_name_scope: drop the enclosing name scopes from the name
            (keeps the graph path and the op's own scope name).
        eager: ``tf.executing_eagerly()`` when the caller already knows it.
    """

    # Eager slots taken, per kind; guarded by _lock (several threads may
    # run eager collectives at once).
    _lock = threading.Lock()
    _busy: Dict[str, Set[int]] = {}

    def __init__(self, kind: str, name: Optional[str],
                 ignore_name_scope: bool = False,
                 eager: Optional[bool] = None) -> None:
        self._kind = kind
        self._name = name
        self._ignore_name_scope = ignore_name_scope
        self._eager = tf.executing_eagerly() if eager is None else eager
        self._slot: Optional[int] = None
        self._scope: Any = None

    def __enter__(self) -> str:
        if self._eager:
            if self._name is not None:
                return self._name
            if _eager_is_async():
                return auto_name(self._kind)
            with self._lock:
                busy = self._busy.setdefault(self._kind, set())
                slot = 0
                while slot in busy:
                    slot += 1
                busy.add(slot)
            self._slot = slot
            return "%s.eager.%d" % (self._kind, slot)
        graph = tf.compat.v1.get_default_graph()
        base = self._kind if self._name is None else _scope_base(self._name)
        self._scope = graph.name_scope(base)
        full = self._scope.__enter__().rstrip("/")
        if self._ignore_name_scope:
            full = full.rsplit("/", 1)[-1]
        path = graph_path(graph)
        name = "%s:%s" % (path, full) if path else full
        _branch_check.check(graph, name)
        return name

    def __exit__(self, *exc: Any) -> None:
        if self._slot is not None:
            with self._lock:
                self._busy[self._kind].discard(self._slot)
        if self._scope is not None:
            self._scope.__exit__(*exc)
