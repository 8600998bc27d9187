"""hbcore_tf.keras: the horovod.tensorflow.keras API for Keras 3 and tf_keras.

    import hbcore_tf.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Keras 3 is served by default; tf_keras when TF_USE_LEGACY_KERAS=1 (the same
rule as tf.keras). Keras 3 compiles train steps with XLA on GPUs by
default; hbcore's collectives have no XLA kernel, so a model compiled with
hbcore's DistributedOptimizer compiles without XLA (see _keras_xla.py).
"""
from typing import Any, Optional

import tensorflow as tf

from hbcore_tf import (Adasum, Average, Compression, Max, Min, Product, Sum,
                       allgather_object, broadcast_object, ccl_built,
                       cross_rank, cross_size, cuda_built, ddl_built,
                       gloo_built, gloo_enabled, init, is_homogeneous,
                       is_initialized, local_rank, local_size, mpi_built,
                       mpi_enabled,
                       mpi_threads_supported, nccl_built, rank, rocm_built,
                       shutdown, size)
from hbcore_tf._base import compat as _compat
from hbcore_tf import functions as _functions
from hbcore_tf import mpi_ops as _mpi_ops
from hbcore_tf.keras import callbacks, layers, metrics
from hbcore_tf.keras.model_loading import load_model
from hbcore_tf._parallel.gradient_reduction import (
    resolve_groups as _resolve_groups)
from hbcore_tf._parallel.distributed_optimizer import (
    DistributedOptimizer as _DistributedOptimizer)
from hbcore_tf.process_sets import (ProcessSet, add_process_set,
                                    global_process_set, remove_process_set)
from hbcore_tf.sync_batch_norm import layer_class as _sync_bn_class

# hvd.SyncBatchNormalization of the Keras this module serves.
SyncBatchNormalization = _sync_bn_class()


def DistributedOptimizer(optimizer: Any, name: Optional[str] = None,
                         device_dense: str = "", device_sparse: str = "",
                         compression: Any = Compression.none,
                         sparse_as_dense: bool = False,
                         gradient_predivide_factor: float = 1.0,
                         op: Any = Average, backward_passes_per_step: int = 1,
                         average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups: Any = None,
                         process_set: Any = global_process_set,
                         scale_local_gradients: bool = True,
                         bucket_cap_mb: Optional[float] = None) -> Any:
    """Wraps a Keras optimizer so that it averages gradients over all ranks
    (see hbcore_tf.DistributedOptimizer for every argument).

    Args:
        optimizer: a Keras 3 or tf_keras (current or legacy) optimizer.
        name: prefix of the allreduce ops' names (default
            "Distributed" + class name).
        device_dense: device for dense gradient allreduces.
        device_sparse: device for sparse (IndexedSlices) gradient
            allreduces.
        compression: Compression.none or Compression.fp16.
        sparse_as_dense: convert IndexedSlices gradients to dense tensors
            before reducing.
        gradient_predivide_factor: with Average, divide gradients by this
            before the sum and by size/factor after it.
        op: Average (default) or Sum.
        backward_passes_per_step: gradients of this many passes are summed
            locally and reduced once.
        average_aggregated_gradients: with backward_passes_per_step > 1,
            divide the locally summed gradients by N.
        num_groups: deprecated alias of ``groups`` as an integer.
        groups: None (one fused collective per step), an integer k, or a
            list of lists of variables (one collective per list).
        process_set: the ranks gradients are reduced over (default: all).
        scale_local_gradients: divide gradients of variables registered
            with ``register_local_var`` by size().
        bucket_cap_mb: SageMaker alias of the fusion threshold / bucket
            size in MiB (see
            hbcore_tf._parallel.distributed_optimizer.apply_bucket_cap_mb).

    Returns:
        An instance of a subclass of the optimizer's class with the same
        name (saved models record the plain Keras class).

    Raises:
        ValueError: ``optimizer`` is not a Keras optimizer (a
            tf.compat.v1.train.Optimizer included), ``groups`` is an
            integer <= 0 (as in Horovod's Keras API), or an invalid
            argument (as hbcore_tf.DistributedOptimizer).
        NotImplementedError: op=Adasum or a non-global process set.

    Warns:
        DeprecationWarning: ``num_groups`` is not 0 (use ``groups``).
    """
    family = _compat.optimizer_family(optimizer)
    if not _compat.is_keras_family(family):
        raise ValueError("hbcore_tf.keras.DistributedOptimizer wraps Keras "
                         "optimizers; use hbcore_tf.DistributedOptimizer for "
                         "%s" % type(optimizer).__name__)
    # The shared check (as Horovod's Keras DistributedOptimizer): num_groups
    # warns and stands for groups only when groups is None; an integer
    # groups must be > 0. Resolved here so the warning names our caller.
    groups = _resolve_groups(num_groups, groups, stacklevel=3)
    return _DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense,
        device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        num_groups=0, groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients,
        bucket_cap_mb=bucket_cap_mb)


def PartialDistributedOptimizer(optimizer: Any, name: Optional[str] = None,
                                device_dense: str = "",
                                device_sparse: str = "",
                                compression: Any = Compression.none,
                                sparse_as_dense: bool = False,
                                gradient_predivide_factor: float = 1.0,
                                op: Any = Average,
                                backward_passes_per_step: int = 1,
                                average_aggregated_gradients: bool = False,
                                groups: Any = None,
                                process_set: Any = global_process_set,
                                local_layers: Any = None,
                                scale_local_gradients: bool = True) -> Any:
    """DistributedOptimizer whose gradients of ``local_layers``' trainable
    variables are not allreduced (model-parallel layers whose weights
    differ per rank); Horovod 0.28's signature.

    Args:
        optimizer: a Keras 3 or tf_keras optimizer.
        local_layers: None, a Keras layer, or a collection of Keras layers
            whose variables are registered with ``register_local_var``.
        scale_local_gradients: divide the local gradients by size() (their
            loss is one rank's share of the global loss).
        (others as in hbcore_tf.DistributedOptimizer)

    Returns:
        The distributed optimizer, with the layers' variables registered as
        local (more can be added with ``register_local_var``).

    Raises:
        ValueError: local_layers holds something that is not a Keras layer
            (Horovod's message), or as DistributedOptimizer.
    """
    local_vars = _compat.local_layer_variables(local_layers)
    wrapped = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense,
        device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients)
    for variable in local_vars:
        wrapped.register_local_var(variable)
    return wrapped


def broadcast_global_variables(root_rank: int) -> Any:
    """Broadcasts all global variables of the Keras session's graph from
    ``root_rank`` (tf_keras in graph mode only; in eager mode use
    callbacks.BroadcastGlobalVariablesCallback or hvd.broadcast_variables).

    Args:
        root_rank: rank whose variable values are kept.

    Returns:
        What the Keras session's ``run`` returns for the broadcast op
        (None: the op is a group of assigns).

    Raises:
        RuntimeError: in eager mode (as horovod.tensorflow.keras does).
        ValueError: hbcore is not initialized.
    """
    op = _functions.broadcast_global_variables(root_rank)
    return _compat.keras_session().run(op)


def _as_tensor(value: Any) -> Any:
    return value if isinstance(value, (tf.Tensor, tf.Variable)) else \
        tf.constant(value)


def _evaluate(result: Any) -> Any:
    """Eagerly: the tensor. In a tf.compat.v1 graph (tf_keras with eager
    execution disabled): its value, run in Keras' session (as Horovod's
    Keras helpers do)."""
    if tf.executing_eagerly() or \
            tf.compat.v1.executing_eagerly_outside_functions():
        return result  # eager, or traced into a tf.function: a tensor
    if getattr(result.graph, "building_function", False):
        return result  # a function graph inside a v1 graph
    return _compat.keras_session().run(result)


def allreduce(value: Any, name: Optional[str] = None,
              average: Optional[bool] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, op: Any = None,
              compression: Any = Compression.none) -> Any:
    """Allreduces a value (numpy array, number or tensor) over all ranks.

    Args:
        value: a numpy array, number, tf.Tensor or tf.Variable; same shape
            and dtype on every rank.
        name: name matched across ranks (derived from the graph when None).
        average: deprecated; use ``op``.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        op: Average (default), Sum, Min, Max or Product.
        compression: Compression.none or Compression.fp16.

    Returns:
        A tensor with the reduced value (use ``.numpy()``); in a
        tf.compat.v1 graph, its value (a numpy array) computed in Keras'
        session.

    Raises:
        ValueError: hbcore is not initialized, or both average and op given.
        NotImplementedError: op is Adasum.
        tf.errors.FailedPreconditionError: ranks disagree on the value.
    """
    return _evaluate(_mpi_ops.allreduce(
        _as_tensor(value), average=average, compression=compression, op=op,
        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        name=name))


def allgather(value: Any, name: Optional[str] = None) -> Any:
    """Concatenates a value from every rank along the first dimension.

    Args:
        value: a numpy array, tf.Tensor or tf.Variable of at least 1-D; the
            first dimension may differ across ranks, the others must match.
        name: name matched across ranks (derived from the graph when None).

    Returns:
        A tensor with the rows of rank 0, then rank 1, and so on (in a
        tf.compat.v1 graph: its value, computed in Keras' session).

    Raises:
        ValueError: hbcore is not initialized.
        tf.errors.FailedPreconditionError: dtype or trailing dimensions
            differ across ranks.
        tf.errors.InvalidArgumentError: ``value`` is a scalar.
    """
    return _evaluate(_mpi_ops.allgather(_as_tensor(value), name=name))


def broadcast(value: Any, root_rank: int, name: Optional[str] = None) -> Any:
    """Returns ``root_rank``'s value on every rank.

    Args:
        value: a numpy array, number, tf.Tensor or tf.Variable; same shape
            and dtype on every rank.
        root_rank: rank whose value is sent to all others.
        name: name matched across ranks (derived from the graph when None).

    Returns:
        A tensor holding ``root_rank``'s value (in a tf.compat.v1 graph:
        the value, computed in Keras' session).

    Raises:
        ValueError: hbcore is not initialized.
        tf.errors.InvalidArgumentError: ``root_rank`` is out of range.
        tf.errors.FailedPreconditionError: shape, dtype or root differ
            across ranks.
    """
    return _evaluate(_mpi_ops.broadcast(_as_tensor(value), root_rank,
                                        name=name))


def reducescatter(value: Any, name: Optional[str] = None,
                  op: Any = Average) -> Any:
    """Reduces a value over all ranks and returns this rank's block of
    rows (with n rows and s ranks, rank r gets n // s rows, plus one when
    r < n % s).

    Args:
        value: a numpy array, tf.Tensor or tf.Variable of at least 1-D;
            same shape and dtype on every rank.
        name: name matched across ranks (derived from the graph when None).
        op: Average (default), Sum, Min, Max or Product.

    Returns:
        A tensor with this rank's rows of the reduced value (in a
        tf.compat.v1 graph: its value, computed in Keras' session).

    Raises:
        ValueError: hbcore is not initialized.
        NotImplementedError: op is Adasum.
        tf.errors.FailedPreconditionError: ranks disagree on the value.
    """
    return _evaluate(_mpi_ops.reducescatter(_as_tensor(value), op=op,
                                            name=name))


def __getattr__(name: str) -> Any:
    if name == "elastic":
        # Loaded on use, as Horovod's hvd.elastic (it imports hbcore.elastic).
        import hbcore_tf.keras.elastic
        return hbcore_tf.keras.elastic
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size",
    "local_rank", "cross_size", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built",
    "ddl_built", "ccl_built", "cuda_built", "rocm_built", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "Compression",
    "DistributedOptimizer", "PartialDistributedOptimizer",
    "SyncBatchNormalization", "broadcast_global_variables", "allreduce",
    "allgather", "broadcast", "reducescatter", "load_model", "callbacks",
    "layers", "metrics", "broadcast_object",
    "allgather_object",
]
