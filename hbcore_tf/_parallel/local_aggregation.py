"""Local gradient aggregation (``backward_passes_per_step`` > 1).

Each backward pass adds its gradients into local accumulators; every N-th
pass the accumulated sums (divided by N when
``average_aggregated_gradients``) are allreduced and applied, and the
accumulators reset. Between updates nothing crosses the network.
``__call__`` does it all in apply_gradients (Keras optimizers, and v1
gradients computed elsewhere); ``accumulate_and_reduce`` and
``is_update_pass`` split it as Horovod's v1 DistributedOptimizer does:
compute_gradients returns the reduced aggregate on update passes (so a
transform between compute and apply acts on it), apply_gradients applies
on those passes only.

The decision is a ``tf.cond`` on a step counter, so one implementation
serves eager code, tf.function train steps (Keras' model.fit) and v1
graphs. Every rank takes the same branch at the same step because the
counters advance identically. Accumulators are created once, outside any
function being traced (``tf.init_scope``), as non-trainable local
variables (in v1 graphs: the LOCAL_VARIABLES collection, so savers and
BroadcastGlobalVariablesHook leave them alone and local_init_op zeroes
them).

A variable whose gradient is None on the update pass but was not on an
earlier pass of the cycle still gets its aggregate applied, and its
accumulator reset, in eager mode, where each pass may leave out other
variables: the aggregator remembers which accumulators took a gradient
since the last update. (A traced function has one pattern of None
gradients for all its passes, so the question does not arise there.)
"""
from typing import Any, Callable, Dict, List, Optional, Sequence

import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._ops import branch_check


def _local_variable(initial_value: Any, name: str) -> tf.Variable:
    return tf.compat.v1.Variable(
        initial_value, trainable=False, name=name, use_resource=True,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


class LocalGradientAggregator:
    """Accumulates gradients locally and applies them every N passes.

    Args:
        backward_passes_per_step: N, the passes per update (>= 1).
        average_aggregated_gradients: divide the accumulated sum by N.
        name: prefix of the accumulator variables' names.

    Raises:
        ValueError: backward_passes_per_step < 1.
    """

    def __init__(self, backward_passes_per_step: int,
                 average_aggregated_gradients: bool = False,
                 name: str = "hbcore_local_aggregation") -> None:
        if int(backward_passes_per_step) < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r"
                             % (backward_passes_per_step,))
        self.passes = int(backward_passes_per_step)
        self.average = bool(average_aggregated_gradients)
        self.name = name
        self._accumulators: Dict[Any, tf.Variable] = {}
        self._counters: Dict[Any, tf.Variable] = {}
        # Eager mode: variable key -> accumulator of every variable that
        # took a gradient since the last update pass (see the module doc).
        self._eager_pending: Dict[Any, tf.Variable] = {}

    def _graph_key(self) -> Any:
        # v1 graphs each need their own variables; eager and tf.function
        # share the eager ones.
        with tf.init_scope():
            if tf.executing_eagerly():
                return None
            return tf.compat.v1.get_default_graph()

    def _counter(self) -> tf.Variable:
        key = self._graph_key()
        if key not in self._counters:
            with tf.init_scope():
                self._counters[key] = _local_variable(
                    tf.constant(0, tf.int64), self.name + "/counter")
        return self._counters[key]

    def _accumulator(self, variable: Any) -> tf.Variable:
        var = _compat.unwrap_variable(variable)
        key = (self._graph_key(), _compat.variable_key(variable))
        acc = self._accumulators.get(key)
        if acc is None:
            with tf.init_scope():
                base = var.name.split(":")[0].replace("/", "_")
                acc = _local_variable(
                    tf.zeros(var.shape, var.dtype.base_dtype),
                    "%s/%s" % (self.name, base))
            self._accumulators[key] = acc
        return acc

    def _pass_accumulators(self, grads: List[Any], variables: List[Any]
                           ) -> List[Optional[tf.Variable]]:
        """The accumulator of each variable this pass involves, else None:
        those with a gradient now, and (eager) those that took one earlier
        in the cycle."""
        eager = tf.executing_eagerly()
        accumulators: List[Optional[tf.Variable]] = []
        for grad, variable in zip(grads, variables):
            key = _compat.variable_key(variable)
            if grad is not None:
                acc = self._accumulator(variable)
                if eager:
                    self._eager_pending[key] = acc
            else:
                acc = self._eager_pending.get(key) if eager else None
            accumulators.append(acc)
        return accumulators

    def _cycle_ended(self) -> None:
        """Called where an update pass resets the accumulators."""
        if tf.executing_eagerly():
            self._eager_pending.clear()

    def __call__(self, grads: Sequence[Any], variables: Sequence[Any],
                 apply_fn: Callable[[List[Any]], Any],
                 skip_fn: Optional[Callable[[], Any]] = None) -> Any:
        """Adds this pass's gradients; every N-th pass calls ``apply_fn``.

        Args:
            grads: one gradient (tensor, tf.IndexedSlices or None) per
                variable; sparse gradients are accumulated densely.
            variables: the variables, in the same order.
            apply_fn: called with the aggregated gradients (None kept) on
                update passes; reduces them across ranks and applies them.
            skip_fn: called on the other passes (e.g. to advance the
                optimizer's iteration counter).

        Returns:
            A boolean tensor: whether this pass applied an update.
        """
        grads = list(grads)
        variables = list(variables)
        accumulators = self._pass_accumulators(grads, variables)
        counter = self._counter()
        updates = []
        for grad, acc in zip(grads, accumulators):
            if grad is not None:
                dense = tf.convert_to_tensor(grad)
                updates.append(acc.assign_add(tf.cast(dense, acc.dtype)))
        with tf.control_dependencies(updates):
            count = counter.assign_add(1)

        def apply_branch():
            scale = 1.0 / self.passes if self.average else 1.0
            aggregated = []
            for acc in accumulators:
                if acc is None:
                    aggregated.append(None)
                    continue
                value = acc.read_value()
                if scale != 1.0:
                    value = value * tf.cast(scale, value.dtype)
                aggregated.append(value)
            result = apply_fn(aggregated)
            deps = _as_deps(result)
            with tf.control_dependencies(deps):
                resets = [acc.assign(tf.zeros_like(acc)) for acc in
                          accumulators if acc is not None]
                resets.append(counter.assign(tf.constant(0, tf.int64)))
            self._cycle_ended()
            with tf.control_dependencies(resets):
                return tf.constant(True)

        def skip_branch():
            deps = _as_deps(skip_fn() if skip_fn is not None else None)
            with tf.control_dependencies(deps):
                return tf.constant(False)

        # The counter is the same on every rank: so is the branch taken.
        with branch_check.rank_uniform():
            return tf.cond(count >= self.passes, apply_branch, skip_branch)

    def accumulate_and_reduce(self, grads: Sequence[Any],
                              variables: Sequence[Any],
                              reduce_fn: Callable[[List[Any]], List[Any]]
                              ) -> List[Any]:
        """Horovod's compute_gradients half of local aggregation.

        Adds this pass's gradients to the accumulators; on every N-th pass
        returns ``reduce_fn`` of the aggregated gradients (divided by N
        when averaging) and resets the accumulators and the counter, on
        the other passes this pass's own gradients (dense). Pair with
        :meth:`is_update_pass` in apply_gradients.

        Args:
            grads: one gradient (tensor, tf.IndexedSlices or None) per
                variable.
            variables: the variables, in the same order.
            reduce_fn: reduces a list of aggregated gradients (None kept)
                across ranks, returning the list in the same order.

        Returns:
            One dense gradient per variable (None kept; in eager mode an
            update pass also returns the aggregate of a variable whose
            gradient is None now but was not earlier in the cycle).
        """
        grads = list(grads)
        variables = list(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        accumulators = self._pass_accumulators(grads, variables)
        # On update passes: every variable with an accumulator this pass.
        involved = [i for i, acc in enumerate(accumulators) if acc is not None]
        dense = [None if g is None else tf.convert_to_tensor(g)
                 for g in grads]
        counter = self._counter()
        updates = [accumulators[i].assign_add(
            tf.cast(dense[i], accumulators[i].dtype)) for i in present]
        with tf.control_dependencies(updates):
            count = counter.assign_add(1)

        def reduce_branch():
            scale = 1.0 / self.passes if self.average else 1.0
            aggregated: List[Any] = [None] * len(grads)
            for i in involved:
                value = accumulators[i].read_value()
                if scale != 1.0:
                    value = value * tf.cast(scale, value.dtype)
                aggregated[i] = value
            reduced = reduce_fn(aggregated)
            values = [tf.cast(tf.convert_to_tensor(reduced[i]),
                              accumulators[i].dtype) for i in involved]
            with tf.control_dependencies(values):
                resets = [accumulators[i].assign(
                    tf.zeros_like(accumulators[i])) for i in involved]
                resets.append(counter.assign(tf.constant(0, tf.int64)))
            self._cycle_ended()
            with tf.control_dependencies(resets):
                return [tf.identity(v) for v in values]

        def local_branch():
            return [tf.identity(dense[i]) for i in present]

        if tf.executing_eagerly():
            # Eager: the branches may differ in length (``involved`` holds
            # the pending variables too), so no tf.cond.
            update = bool(count >= self.passes)
            result = reduce_branch() if update else local_branch()
            indices = involved if update else present
        else:
            # Traced: ``involved`` is ``present``.
            with branch_check.rank_uniform():  # a counter, alike everywhere
                result = tf.cond(count >= self.passes, reduce_branch,
                                 local_branch)
            indices = present
        if not isinstance(result, (list, tuple)):
            result = [result]
        out: List[Any] = [None] * len(grads)
        for i, value in zip(indices, result):
            out[i] = value
        return out

    def is_update_pass(self, after: Sequence[Any] = ()) -> tf.Tensor:
        """Whether the pass whose gradients :meth:`accumulate_and_reduce`
        returned was an update pass (its counter was reset to 0).

        Args:
            after: tensors (e.g. the gradients, or values computed from
                them) the counter is read after.

        Returns:
            A boolean scalar tensor.
        """
        deps = []
        for value in after:
            if isinstance(value, tf.IndexedSlices):
                value = value.values
            if value is not None and not tf.executing_eagerly():
                deps.append(value)
        counter = self._counter()
        with tf.control_dependencies(deps):
            return tf.equal(counter.read_value(), 0)

    def graph_key(self) -> Any:
        """The key of the accumulators of the graph being built (None:
        eager and tf.function)."""
        return self._graph_key()


def _as_deps(result: Any) -> List[Any]:
    """Control dependencies for a value an apply call returned (an op, a
    tensor, a variable, or None), empty in eager mode."""
    if result is None or tf.executing_eagerly():
        return []
    if isinstance(result, (tf.Operation, tf.Tensor)):
        return [result]
    if isinstance(result, tf.Variable):
        return [tf.identity(result)]
    value = getattr(result, "value", None)  # Keras 3 variable
    if isinstance(value, tf.Variable):
        return [tf.identity(value)]
    return []
