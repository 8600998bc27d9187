"""Allreduce of one step's gradients, shared by DistributedOptimizer and
DistributedGradientTape.

All gradients of a step go to the core in ONE grouped_allreduce (one op, so
one hb_enqueue, one negotiation and one fused collective), or one call per
group when ``groups`` / ``num_groups`` asks for explicit groups. Called
eagerly, the reduction runs inside a tf.function (traced once per gradient
signature): the graph names its tensors the same way every step, so the
core's response cache answers the negotiation, and compression casts run
as graph ops. Inside a tf.function (Keras' train step) the ops are added to
the caller's graph.

Data sync (see hbcore_tf._parallel.step_weight): when the step has a weight (1.0
when this rank had data, 0.0 when it joined with an empty batch), each
gradient is masked by it and the reduction is a weighted average: the
weight rides as one more scalar in the first call, and every result is
divided by the summed weight instead of size(). Without a weight nothing
changes.
"""
import numbers
import warnings
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from hbcore_tf import process_sets
from hbcore_tf._base import compat as _compat
from hbcore_tf._base.rank_local import is_sharded
from hbcore_tf._ops.xla import check_not_xla
from hbcore_tf._parallel import non_finite as _non_finite
from hbcore_tf._parallel import step_weight as _step_weight
from hbcore_tf.compression import Compression
from hbcore_tf.mpi_ops import Adasum, Average, Sum, grouped_allreduce, size


# Horovod 0.28's DeprecationWarning for num_groups.
NUM_GROUPS_DEPRECATED = ("Parameter `num_groups` has been replaced by "
                         "`groups` and will be removed in v0.23.0.")


def resolve_groups(num_groups: Any, groups: Any, stacklevel: int = 3) -> Any:
    """The public optimizers' ``num_groups`` / ``groups`` arguments, checked
    as Horovod 0.28's DistributedOptimizer (and hbcore_tf.keras') does.

    A ``num_groups`` other than 0 warns that it is deprecated and stands
    for ``groups`` only when ``groups`` is None (``groups`` wins when both
    are given). An integer ``groups`` must then be positive.

    Args:
        num_groups: the deprecated integer argument (0: not given).
        groups: None, a positive integer, or a list of lists of variables.
        stacklevel: passed to warnings.warn (3: the public function's
            caller).

    Returns:
        The groups to use: None, a positive int, or ``groups`` as given
        (lists are checked by GradientReducer).

    Raises:
        ValueError: the resulting integer groups is 0 or negative (or a
            bool).

    Warns:
        DeprecationWarning: ``num_groups`` is not 0.
    """
    if num_groups != 0:
        warnings.warn(NUM_GROUPS_DEPRECATED, DeprecationWarning,
                      stacklevel=stacklevel)
        if groups is None:
            groups = num_groups
    if groups is None:
        return None
    if isinstance(groups, (bool, np.bool_)) or (
            isinstance(groups, numbers.Number) and not (
                isinstance(groups, numbers.Integral) and groups > 0)):
        raise ValueError("groups should be a positive integer or a list of "
                         "lists of tf.Variable, got %r" % (groups,))
    if isinstance(groups, numbers.Integral):
        return int(groups)
    return groups


def _group_lists(groups: Any) -> Any:
    """GradientReducer's ``groups`` (already through resolve_groups): None
    (one group of everything) or a positive int k (k groups in order) as
    given, or a list of lists of variables, copied.

    Raises:
        ValueError: anything else.
    """
    if groups is None:
        return None
    if isinstance(groups, (int, np.integer)) and not isinstance(
            groups, (bool, np.bool_)) and groups > 0:
        return int(groups)
    if isinstance(groups, (list, tuple)) and all(
            isinstance(g, (list, tuple)) for g in groups):
        return [list(g) for g in groups]
    raise ValueError("groups should be a positive integer or a list of "
                     "lists of tf.Variable, got %r" % (groups,))


class GradientReducer:
    """Averages (or sums) a step's gradients over all ranks.

    Args:
        name: prefix of the collective's op names. Inside a traced train
            step TF makes op names unique within the graph; eager
            reductions run one at a time, so reducers may share a name.
        compression: Compression.none or Compression.fp16.
        sparse_as_dense: convert tf.IndexedSlices gradients to dense first.
        op: Average (default) or Sum; Adasum is not supported.
        gradient_predivide_factor: with Average, divide by this before the
            sum and by size/factor after it.
        groups: None (one fused call for all), a positive int k (k calls
            over consecutive gradients), or lists of variables, each list
            one call (variables in no list get a call each). The public
            functions' ``num_groups`` is resolved into it by
            resolve_groups first.
        device_dense, device_sparse: passed to grouped_allreduce.
        process_set: the ranks the gradients are reduced over (default:
            all; Average divides by the set's size). Every member must
            reduce; on ranks outside it the gradients come back
            unreduced, as in Horovod.
        scale_local_gradients: multiply gradients of local variables (see
            register_local) by 1/size (with any op, as Horovod does: the
            loss of each rank is one share of the global loss).
        bucket_bytes: with no ``groups``, > 0 splits the gradients into
            buckets of at most this many bytes (by the variables' static
            sizes), in reverse variable order (the last layers' gradients
            are ready first), one fused collective per bucket: SageMaker
            data parallel's ``bucket_cap_mb``.

    Raises:
        ValueError: bad groups, or gradient_predivide_factor with op != Average.
        NotImplementedError: Adasum.
    """

    def __init__(self, name: str, compression: Any = Compression.none,
                 sparse_as_dense: bool = False, op: Any = Average,
                 gradient_predivide_factor: float = 1.0,
                 groups: Any = None, device_dense: str = "",
                 device_sparse: str = "",
                 process_set: Any = process_sets.global_process_set,
                 scale_local_gradients: bool = True,
                 bucket_bytes: int = 0) -> None:
        op = Average if op is None else op
        if op == Adasum:
            raise NotImplementedError(
                "Adasum is not supported by hbcore; use op=Average or Sum")
        if op not in (Average, Sum):
            raise ValueError("gradients can be reduced with Average or Sum, "
                             "got op=%r" % (op,))
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor is supported only "
                             "with op=Average")
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be positive")
        self.name = name
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        self.prescale = 1.0 / gradient_predivide_factor
        self.postscale = float(gradient_predivide_factor)
        self.groups = _group_lists(groups)
        self.device_dense = device_dense
        self.device_sparse = device_sparse
        self.scale_local_gradients = scale_local_gradients
        self.bucket_bytes = int(bucket_bytes)
        process_sets.process_set_id(process_set)  # registered, or raises
        self.process_set = process_set
        self._local: Dict[Any, Any] = {}
        self._eager_fns: Dict[Any, Callable] = {}

    def _set_size(self) -> int:
        if process_sets.process_set_id(self.process_set) == 0:
            return size()
        return self.process_set.size()

    def member(self) -> bool:
        """Whether this rank belongs to the reducer's process set (always
        for the global set). Decided in Python when the step is traced, as
        Horovod does outside elastic mode: membership cannot change while
        a set exists."""
        if process_sets.process_set_id(self.process_set) == 0:
            return True
        return bool(self.process_set.included())

    # -- local (not reduced) variables ------------------------------------
    def register_local(self, variable: Any) -> None:
        """Marks a variable whose gradient stays local (not allreduced)."""
        self._local[_compat.variable_key(variable)] = variable

    def is_local(self, variable: Any) -> bool:
        return _compat.variable_key(variable) in self._local

    # -- planning ------------------------------------------------------------
    def _plan(self, variables: Sequence[Any], indices: List[int]) -> List[List[int]]:
        """Splits the gradient positions into the calls to issue."""
        if self.groups is None and self.bucket_bytes > 0 and indices:
            return _size_buckets(variables, indices, self.bucket_bytes)
        if self.groups is None or not indices:
            return [indices] if indices else []
        if isinstance(self.groups, int):
            k = min(self.groups, len(indices))
            return [[int(i) for i in part]
                    for part in np.array_split(indices, k) if len(part)]
        position = {_compat.variable_key(variables[i]): i for i in indices}
        plan, used = [], set()
        for group in self.groups:
            members = [position[_compat.variable_key(v)] for v in group
                       if _compat.variable_key(v) in position]
            members = [m for m in members if m not in used]
            if members:
                used.update(members)
                plan.append(sorted(members))
        plan.extend([i] for i in indices if i not in used)
        return plan

    # -- reduction -----------------------------------------------------------
    def _reduce_graph(self, grads: List[Any], plan: List[List[int]],
                      weight: Any = None) -> List[Any]:
        if weight is not None:
            return self._reduce_weighted(grads, plan, weight)
        out = list(grads)
        for number, members in enumerate(plan):
            name = "%s_Allreduce" % self.name if len(plan) == 1 else \
                "%s_Allreduce_g%d" % (self.name, number)
            # The predivide factors go to the dense gradients only: an
            # IndexedSlices allreduce is an allgather (no sum to protect
            # from overflow, and pre * post == 1), and grouped_allreduce
            # refuses scale factors for it, as Horovod does. The split
            # keeps the core names of one call: <name>.i / <name>_sparse.
            dense = [i for i in members
                     if not isinstance(grads[i], tf.IndexedSlices)]
            sparse = [i for i in members
                      if isinstance(grads[i], tf.IndexedSlices)]
            for part, pre, post in ((dense, self.prescale, self.postscale),
                                    (sparse, 1.0, 1.0)):
                if not part:
                    continue
                reduced = grouped_allreduce(
                    [grads[i] for i in part], device_dense=self.device_dense,
                    device_sparse=self.device_sparse,
                    compression=self.compression, op=self.op,
                    prescale_factor=pre, postscale_factor=post, name=name,
                    process_set=self.process_set)
                for i, value in zip(part, reduced):
                    out[i] = value
        return out

    def _reduce_weighted(self, grads: List[Any], plan: List[List[int]],
                         weight: tf.Tensor) -> List[Any]:
        """Masked sums, divided by the summed weight when averaging.

        Every call is a Sum; the weight is appended to the first call, so
        the collectives issued depend only on the plan, never on the data.
        gradient_predivide_factor is not applied here: it only guards the
        sum against overflow (pre * post cancels in an average), and the
        sparse members of a call refuse scale factors.
        """
        weight = tf.reshape(tf.cast(weight, tf.float32), [])
        has_data = tf.greater(weight, 0.0)
        masked = [_masked(g, has_data) for g in grads]
        out = list(masked)
        total = None
        for number, members in enumerate(plan):
            name = "%s_WeightedAllreduce_g%d" % (self.name, number)
            tensors = [masked[i] for i in members]
            carry = total is None
            if carry:
                tensors.append(weight)
            reduced = grouped_allreduce(
                tensors, device_dense=self.device_dense,
                device_sparse=self.device_sparse, compression=self.compression,
                op=Sum, name=name, process_set=self.process_set)
            if carry:
                total = reduced.pop()
            for i, value in zip(members, reduced):
                out[i] = value
        if self.op != Average:
            return out
        return [_scale_by(g, 1.0 / tf.maximum(total, 1.0)) for g in out]

    @tf.autograph.experimental.do_not_convert  # plain Python, see collectives
    def reduce(self, grads: Sequence[Any], variables: Sequence[Any]) -> List[Any]:
        """Returns the reduced gradients in input order; None stays None.

        When some gradients are not allreduced (a sharded table's, or a
        registered local variable's), a non-finite value in them on any
        rank makes one gradient NaN on every rank
        (hbcore_tf._parallel.non_finite), so that loss-scale optimizers
        skip the same steps everywhere.

        Args:
            grads: one gradient (tensor, tf.IndexedSlices or None) per variable.
            variables: the variables the gradients belong to.
        """
        grads = list(grads)
        variables = list(variables)
        if len(grads) != len(variables):
            raise ValueError("got %d gradients for %d variables" % (
                len(grads), len(variables)))
        check_not_xla("hbcore gradient allreduce")
        positions: List[int] = []
        unreduced: List[int] = []
        out: List[Any] = list(grads)
        for i, (grad, var) in enumerate(zip(grads, variables)):
            if grad is None:
                continue
            if is_sharded(var):
                # A sharded table's gradient comes out of the lookup's
                # backward exchange already summed over ranks and scaled
                # (hbcore_tf.embedding.exchange): never allreduced.
                unreduced.append(i)
                continue
            if self.is_local(var):
                # As Horovod 0.28: a local gradient is returned as computed
                # (no sparse_as_dense), divided by the set's size whenever
                # scale_local_gradients is set, whatever the reduce op.
                if self.scale_local_gradients:
                    out[i] = _scale(grad, 1.0 / self._set_size())
                unreduced.append(i)
                continue
            if self.sparse_as_dense and isinstance(grad, tf.IndexedSlices):
                out[i] = tf.convert_to_tensor(grad)
            positions.append(i)
        if not (positions or unreduced) or not self.member():
            # As Horovod: a rank outside the process set keeps its own
            # gradients (no collective is issued, so it cannot block or
            # fail the set's members).
            return out
        plan = self._plan([variables[i] for i in positions],
                          list(range(len(positions))))
        weight = _step_weight.current()
        if tf.executing_eagerly():
            fn = self._eager_fn(tuple(positions), plan, tuple(unreduced),
                                weight is not None)
            return list(fn(out, weight))
        return self._reduce_step(out, positions, plan, unreduced, weight)

    def _reduce_step(self, grads: List[Any], positions: Sequence[int],
                     plan: List[List[int]], unreduced: Sequence[int],
                     weight: Any) -> List[Any]:
        """The ops of one step's reduction: the collectives of ``plan``
        over ``grads[positions]``, then the non-finite agreement over
        ``grads[unreduced]`` (hbcore_tf._parallel.non_finite)."""
        out = list(grads)
        if positions:
            reduced = self._reduce_graph([out[i] for i in positions], plan,
                                         weight)
            for i, value in zip(positions, reduced):
                out[i] = value
        if unreduced:
            out = _non_finite.propagate(out, unreduced, self.process_set,
                                        self.name)
        return out

    def _eager_fn(self, positions: Tuple[int, ...], plan: List[List[int]],
                  unreduced: Tuple[int, ...], weighted: bool) -> Callable:
        key = (positions, tuple(tuple(p) for p in plan), unreduced, weighted)
        fn = self._eager_fns.get(key)
        if fn is None:
            def run(grads, weight):
                return self._reduce_step(list(grads), positions, plan,
                                         unreduced, weight)

            # The FuncGraph's name prefixes the core's tensor names.
            run.__name__ = "%s_eager" % self.name

            fn = tf.function(run, autograph=False, reduce_retracing=True)
            self._eager_fns[key] = fn
        return fn


def _size_buckets(variables: Sequence[Any], indices: List[int],
                  limit: int) -> List[List[int]]:
    """Positions in reverse order, cut into buckets of at most ``limit``
    bytes (a larger variable, or one of unknown size, is a bucket of its
    own); each bucket sorted. Depends only on the variables, so every rank
    plans the same collectives."""
    buckets: List[List[int]] = []
    current: List[int] = []
    used = 0
    for i in reversed(indices):
        v = variables[i]
        n = tf.TensorShape(v.shape).num_elements()
        size = None if n is None else n * tf.as_dtype(v.dtype).size
        if current and (size is None or used + size > limit):
            buckets.append(sorted(current))
            current, used = [], 0
        current.append(int(i))
        used += size or 0
        if size is None or size > limit:
            buckets.append(sorted(current))
            current, used = [], 0
    if current:
        buckets.append(sorted(current))
    return buckets


def _masked(grad: Any, has_data: tf.Tensor) -> Any:
    """``grad`` where this rank had data, zeros (never NaN) where not."""
    if isinstance(grad, tf.IndexedSlices):
        values = tf.where(has_data, grad.values, tf.zeros_like(grad.values))
        return tf.IndexedSlices(values, grad.indices, grad.dense_shape)
    return tf.where(has_data, grad, tf.zeros_like(grad))


def _scale_by(grad: Any, factor: tf.Tensor) -> Any:
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype),
                                grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


def _scale(grad: Any, factor: float) -> Any:
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype),
                                grad.indices, grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)
