"""Gradients of the collective ops, with horovod.tensorflow 0.28's scaling,
registered with TensorFlow when this module loads (hbcore_tf.mpi_ops, the
ops' public face, loads it, so every use of the ops has them).

For an op whose inputs x_s live on ranks s and whose output gradient on
rank r is g_r (the upstream gradient computed locally on every rank):

- allreduce:     grad x = allreduce(g) with the op's reduce op and scale
                 factors (Average stays Average, Sum stays Sum; Min, Max
                 and Product also reduce the gradient with that op, as
                 Horovod does).
- allgather:     grad x_s = rows of rank s in Average-allreduce(g).
- broadcast:     grad x = Average-allreduce(g) on the root, zeros elsewhere
                 (a runtime select: every rank runs the allreduce).
- alltoall:      grad x = alltoall(g) sent back with the received splits.
- reducescatter: grad x = allgather(g * prescale * postscale), times
                 size() for Sum.

Averaging (allgather, broadcast) matches data-parallel training, where
every rank computes the same loss and DistributedOptimizer averages the
variable gradients. Every rank runs the same gradient collectives, so they
are issued in the same order (eager tape) or graph (name scopes
``gradients/.../HbcoreCollective_grad``) on every rank.

Invariant: a gradient builds the same graph on every rank. Rank-dependent
results are selects on runtime values (``rank_op()``), never a Python
branch on ``rank()`` that adds, drops or lets grappler prune a collective.
"""
from typing import Any, List, Optional, Sequence

import tensorflow as tf

from hbcore_tf._ops import collectives
from hbcore_tf.process_sets import ProcessSet, process_set_by_id

# Reduce op of the gradient allreduce for allgather and broadcast
# (Horovod 0.28: Average; mpi_ops.py _allgather_grad / _broadcast_grad).
_GATHER_GRAD_OP = collectives.Average
_BROADCAST_GRAD_OP = collectives.Average


def _differentiable(t: tf.Tensor) -> bool:
    return t.dtype.is_floating or t.dtype.is_complex


def _dense_grads(op: Any, grads: Sequence[Any]) -> List[tf.Tensor]:
    """Output gradients as dense tensors; a missing one (an output the loss
    does not use on this rank) becomes zeros, so every rank still submits
    the same gradient collectives."""
    out = []
    for g, y in zip(grads, op.outputs):
        if g is None:
            g = tf.zeros_like(y)
        out.append(tf.convert_to_tensor(g))
    return out


@tf.RegisterGradient("HbcoreCollective")
def _collective_grad(op: Any, *grads: Any) -> List[Optional[tf.Tensor]]:
    n = len(op.outputs)
    inputs = list(op.inputs)[:n]
    kind = op.get_attr("op")
    reduce_op = op.get_attr("reduce_op")
    prescale = op.get_attr("prescale_factor")
    postscale = op.get_attr("postscale_factor")
    # The gradient runs over the forward op's process set.
    ps = process_set_by_id(op.get_attr("process_set_id"))
    idx = [i for i in range(n) if _differentiable(inputs[i])]
    result: List[Optional[tf.Tensor]] = [None] * (n + 1)  # + names input
    if not idx:
        return result
    grads = list(grads)
    if kind == collectives._ALLREDUCE:
        # IndexedSlices stay sparse for unscaled Sum/Average (the
        # allgather path, which refuses scale factors as Horovod does);
        # otherwise they are densified, as Horovod's gradient always does.
        sparse_ok = (reduce_op in (collectives.Sum, collectives.Average)
                     and prescale == 1.0 and postscale == 1.0)
        chosen = []
        for i in idx:
            g = grads[i]
            if g is None:
                g = tf.zeros_like(op.outputs[i])
            elif isinstance(g, tf.IndexedSlices) and not sparse_ok:
                g = tf.convert_to_tensor(g)
            chosen.append(g)
        values = collectives.grouped_allreduce(
            chosen, op=reduce_op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=ps)
    else:
        dense = _dense_grads(op, grads)
        chosen = [dense[i] for i in idx]
        if kind == collectives._ALLGATHER:
            values = _allgather_grad([inputs[i] for i in idx], chosen, ps)
        elif kind == collectives._BROADCAST:
            values = _broadcast_grad(chosen, op.get_attr("root_rank"), ps)
        elif kind == collectives._REDUCESCATTER:
            factor = prescale * postscale
            if reduce_op == collectives.Sum:
                factor *= (collectives.size() if ps.process_set_id == 0
                           else ps.size())
            if factor != 1.0:
                chosen = [g * tf.cast(factor, g.dtype) for g in chosen]
            values = collectives.grouped_allgather(chosen, process_set=ps)
        else:
            raise ValueError("HbcoreCollective with unknown op %d" % kind)
    for i, v in zip(idx, values):
        result[i] = v
    return result


def _allgather_grad(inputs: List[tf.Tensor], grads: List[tf.Tensor],
                    ps: ProcessSet) -> List[tf.Tensor]:
    """This rank's rows of the averaged output gradients. The per-rank
    first dimensions come from one allgather of the local ones; the rank
    is read by an op, so every rank builds the same graph (in a process
    set, the member's set rank, which cannot change while the set
    exists)."""
    reduced = collectives.grouped_allreduce(grads, op=_GATHER_GRAD_OP,
                                        process_set=ps)
    local_dims = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in inputs])
    dims = tf.reshape(collectives.allgather(local_dims, process_set=ps),
                      [-1, len(inputs)])
    r = (collectives.rank_op() if ps.process_set_id == 0
         else tf.constant(ps.rank(), tf.int32))
    offsets = tf.reduce_sum(dims[:r], axis=0)
    return [g[offsets[j]:offsets[j] + dims[r, j]]
            for j, g in enumerate(reduced)]


def _broadcast_grad(grads: List[tf.Tensor], root_rank: int,
                    ps: ProcessSet) -> List[tf.Tensor]:
    """The averaged output gradients on the root, zeros on the other ranks.

    Invariant: every rank creates AND runs the same allreduce, so the
    rank-dependence must be a select on a value known only when the graph
    runs (the rank op is stateful, so grappler cannot fold it). A Python
    branch on rank() that returned zeros_like(allreduce result) or
    result * 0 let grappler fold the zeros into a constant and prune the
    allreduce on non-root ranks in a v1 Session: the root then waited for
    a collective the others never submitted (or, worse, matched one of the
    same name from a later graph).
    """
    reduced = collectives.grouped_allreduce(grads, op=_BROADCAST_GRAD_OP,
                                        process_set=ps)
    is_root = tf.equal(collectives.rank_op(), root_rank)
    # tf.where, not a multiplication by a 0/1 mask: non-finite averaged
    # gradients must still give exact zeros off the root.
    return [tf.where(is_root, g, tf.zeros_like(g)) for g in reduced]


@tf.RegisterGradient("HbcoreAlltoall")
def _alltoall_grad(op: Any, grad: Any, _received_splits_grad: Any
                   ) -> List[Optional[tf.Tensor]]:
    if not _differentiable(op.inputs[0]):
        return [None, None, None]
    if grad is None:
        grad = tf.zeros_like(op.outputs[0])
    back, _ = collectives.alltoall_int64_splits(
        tf.convert_to_tensor(grad), op.outputs[1], None, False,
        process_set_by_id(op.get_attr("process_set_id")))
    return [back, None, None]  # tensor, splits, name


# Join, barrier and the topology ops have no inputs to differentiate.
for _op_type in ("HbcoreJoin", "HbcoreBarrier", "HbcoreTopology"):
    tf.no_gradient(_op_type)
