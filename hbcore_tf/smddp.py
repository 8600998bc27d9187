"""``import hbcore_tf.smddp as sdp``: the TensorFlow API of SageMaker's
distributed data parallel library (``smdistributed.dataparallel.tensorflow``)
on hbcore.

    import hbcore_tf.smddp as sdp        # was: smdistributed.dataparallel.tensorflow
    sdp.init()
    tape = sdp.DistributedGradientTape(tape)
    sdp.broadcast_variables(model.variables, root_rank=0)

Names, signatures and documented behaviour follow smddp 1.x. The
collectives run on hbcore's core over MPI (so they work on CPUs and off
SageMaker); launch with ``hbrun -np N``. Differences, all documented in
docs/migration.md:

- ``bucket_cap_mb`` (smddp's bucket size, 25 MB there): after ``init()``
  the gradients travel in buckets of at most that size, one fused
  collective each, in reverse variable order; given before ``init()`` it
  sets hbcore's fusion threshold (HB_FUSION_THRESHOLD) instead.
- smddp's TF2 example calls ``opt.variables()``, a method of the TF 2.3
  Keras optimizers; current Keras optimizers have a ``variables``
  property. ``init()`` makes that property's list also callable
  (returning itself; hbcore_tf._patches.optimizer_variables), so such
  scripts run unchanged. Nothing else about Keras changes.
- ``allreduce`` takes ``param_index`` and ``num_params`` (smddp uses them
  to place the tensor in its buckets); hbcore fuses by readiness, so they
  are validated and otherwise unused.
"""
from typing import Any, Iterable, Optional

import tensorflow as tf

from hbcore_tf import mpi_ops
from hbcore_tf._base import compat as _compat
from hbcore_tf._patches import optimizer_variables
from hbcore_tf.compression import Compression
from hbcore_tf.functions import broadcast_global_variables as _broadcast_globals
from hbcore_tf.functions import broadcast_variables as _broadcast_variables
from hbcore_tf._parallel.gradient_tape import DistributedGradientTape as _tape
from hbcore_tf._parallel.hooks import BroadcastGlobalVariablesHook
from hbcore_tf._parallel.distributed_optimizer import (
    DistributedOptimizer as _optimizer)

_ALREADY_INITIALIZED = ("init() called more than once. "
                        "smdistributed.dataparallel is already initialized.")


class ReduceOp:
    """Reduction operations of smddp (hbcore's Sum, Min, Max, Average)."""
    SUM = mpi_ops.Sum
    MIN = mpi_ops.Min
    MAX = mpi_ops.Max
    AVERAGE = mpi_ops.Average


class _State:
    initialized = False


def init() -> None:
    """Initializes hbcore for smddp users (once per process).

    Raises:
      RuntimeError: called a second time (smddp's message).
    """
    if _State.initialized:
        raise RuntimeError(_ALREADY_INITIALIZED)
    mpi_ops.init()
    # The moment: every smddp script calls init() before it builds its
    # optimizer; from then on opt.variables() works (module docstring).
    optimizer_variables.install(tf_keras=_compat.use_legacy_keras())
    _State.initialized = True


def size() -> int:
    """Number of processes in the job (smddp: GPUs across all nodes)."""
    return mpi_ops.size()


def local_size() -> int:
    """Number of processes on this node."""
    return mpi_ops.local_size()


def rank() -> int:
    """This process's rank in the job."""
    return mpi_ops.rank()


def local_rank() -> int:
    """This process's rank within its node."""
    return mpi_ops.local_rank()


def shutdown() -> None:
    """Shuts hbcore down (optional at the end of a script)."""
    mpi_ops.shutdown()
    _State.initialized = False


def _reduce_op(op: Any, allowed: Iterable[int], what: str) -> int:
    op = ReduceOp.AVERAGE if op is None else op
    allowed = list(allowed)
    if op not in allowed:
        names = {ReduceOp.SUM: "SUM", ReduceOp.MIN: "MIN", ReduceOp.MAX: "MAX",
                 ReduceOp.AVERAGE: "AVERAGE"}
        raise ValueError("%s supports op=%s, got %r" % (
            what, " or ".join("ReduceOp." + names[o] for o in allowed), op))
    return op


def allreduce(tensor: Any, param_index: int, num_params: int,
              compression: Any = Compression.none,
              op: Any = ReduceOp.AVERAGE) -> Any:
    """Allreduces a (gradient) tensor over all processes.

    Args:
      tensor: the tf.Tensor; same shape on every rank.
      param_index: index of the tensor in its list (0 for a single tensor).
      num_params: length of that list.
      compression: Compression.none or Compression.fp16.
      op: ReduceOp.AVERAGE (default, also for None), SUM, MIN or MAX.

    Returns:
      The reduced tensor, same shape and dtype.

    Raises:
      ValueError: param_index outside [0, num_params), or a bad op.
    """
    if not 0 <= int(param_index) < int(num_params):
        raise ValueError("param_index must be in [0, num_params), got "
                         "param_index=%r, num_params=%r" % (param_index,
                                                           num_params))
    op = _reduce_op(op, (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.MIN,
                         ReduceOp.MAX), "allreduce")
    return mpi_ops.allreduce(tensor, compression=compression, op=op)


def oob_allreduce(tensor: Any, compression: Any = Compression.none,
                  op: Any = ReduceOp.AVERAGE) -> Any:
    """Out-of-band allreduce (e.g. a loss value), averaged over processes.

    Args:
      tensor: the tf.Tensor; same shape on every rank.
      compression: Compression.none or Compression.fp16.
      op: ReduceOp.AVERAGE (the only op smddp supports here).

    Returns:
      The averaged tensor.

    Raises:
      ValueError: op is not AVERAGE.
    """
    op = _reduce_op(op, (ReduceOp.AVERAGE,), "oob_allreduce")
    return mpi_ops.allreduce(tensor, compression=compression, op=op)


def broadcast(tensor: Any, root_rank: int) -> Any:
    """``tensor`` of ``root_rank`` on every process.

    Args:
      tensor: the tf.Tensor; same shape and dtype on every rank.
      root_rank: rank whose value is sent to all others.

    Returns:
      A tensor of the same shape and dtype holding ``root_rank``'s value.

    Raises:
      ValueError: hbcore is not initialized.
      tf.errors.InvalidArgumentError: ``root_rank`` is out of range.
      tf.errors.FailedPreconditionError: shape, dtype or root differ
        across ranks.
    """
    return mpi_ops.broadcast(tensor, root_rank)


def broadcast_variables(variables: Any, root_rank: int) -> Any:
    """Assigns ``root_rank``'s values to ``variables`` on every process.

    Args:
      variables: iterable of tf.Variable / Keras variables, the same list
        (order, shapes, dtypes) on every rank.
      root_rank: rank whose values are kept.

    Returns:
      None eagerly (the variables are already updated); in a graph, the op
      that performs the broadcast when run.

    Raises:
      ValueError: hbcore is not initialized.
      tf.errors.InvalidArgumentError: ``root_rank`` is out of range.
    """
    return _broadcast_variables(list(variables), root_rank)


def broadcast_global_variables(root_rank: int) -> Any:
    """Broadcasts every global variable (tf.compat.v1 graphs).

    Args:
      root_rank: rank whose variable values are kept.

    Returns:
      The op to run (e.g. in a tf.compat.v1.Session).

    Raises:
      RuntimeError: called in eager mode.
      ValueError: hbcore is not initialized.
    """
    return _broadcast_globals(root_rank)


def overlap(tensor: Any) -> Any:
    """Identity. In smddp it marks a point for overlapping the backward pass
    with the allreduce under XLA; hbcore overlaps by negotiating tensors as
    they become ready, so nothing is needed here.

    Args:
      tensor: any tensor.

    Returns:
      ``tf.identity(tensor)``.
    """
    return tf.identity(tensor)


def _refuse(name: str, value: Any, default: Any) -> None:
    if value != default:
        raise NotImplementedError("%s is not supported by "
                                  "smdistributed.dataparallel (nor by its "
                                  "hbcore port)" % name)


def DistributedOptimizer(optimizer: Any, name: Optional[str] = None,  # noqa: N802
                         use_locking: bool = False, device_dense: str = "",
                         device_sparse: str = "",
                         compression: Any = Compression.none,
                         sparse_as_dense: bool = False,
                         op: Any = ReduceOp.AVERAGE,
                         bucket_cap_mb: Optional[float] = None) -> Any:
    """Averages gradients over processes before the wrapped optimizer
    applies them (tf.compat.v1.train, Keras 3 and tf_keras optimizers).

    Args:
      optimizer: the optimizer to wrap.
      name: name prefix of the operations.
      use_locking: accepted for compatibility (the wrapped optimizer's own
        setting applies).
      device_dense, device_sparse, sparse_as_dense: not supported (as in
        smddp).
      compression: Compression.none or Compression.fp16.
      op: ReduceOp.AVERAGE only.
      bucket_cap_mb: bucket size in MB: gradient buckets of at most that
        size after init(), the fusion threshold when given before init().

    Raises:
      NotImplementedError: device_dense, device_sparse or sparse_as_dense.
      ValueError: op is not AVERAGE.
    """
    _refuse("device_dense", device_dense, "")
    _refuse("device_sparse", device_sparse, "")
    _refuse("sparse_as_dense", sparse_as_dense, False)
    _reduce_op(op, (ReduceOp.AVERAGE,), "DistributedOptimizer")
    return _optimizer(optimizer, name=name, compression=compression,
                      op=mpi_ops.Average, bucket_cap_mb=bucket_cap_mb)


def DistributedGradientTape(gradtape: tf.GradientTape,  # noqa: N802
                            device_dense: str = "", device_sparse: str = "",
                            compression: Any = Compression.none,
                            op: Any = ReduceOp.AVERAGE) -> Any:
    """A tape whose ``gradient()`` averages the gradients over processes.

    Args:
      gradtape: the tf.GradientTape to wrap (typically after its ``with``
        block).
      device_dense, device_sparse: not supported (as in smddp).
      compression: Compression.none or Compression.fp16.
      op: ReduceOp.AVERAGE only.

    Returns:
      A tape of a subclass of ``type(gradtape)`` sharing its state.

    Raises:
      NotImplementedError: device_dense or device_sparse.
      ValueError: op is not AVERAGE, or ``gradtape`` is not a
        tf.GradientTape.
    """
    _refuse("device_dense", device_dense, "")
    _refuse("device_sparse", device_sparse, "")
    _reduce_op(op, (ReduceOp.AVERAGE,), "DistributedGradientTape")
    return _tape(gradtape, compression=compression, op=mpi_ops.Average)


__all__ = ["BroadcastGlobalVariablesHook", "Compression",
           "DistributedGradientTape", "DistributedOptimizer", "ReduceOp",
           "allreduce", "broadcast", "broadcast_global_variables",
           "broadcast_variables", "init", "local_rank", "local_size",
           "oob_allreduce", "overlap", "rank", "shutdown", "size"]
