"""The TensorFlow collectives over the hbcore runtime: the Python wrappers
of the op library's ops, with horovod.tensorflow 0.28's names, signatures,
defaults and semantics. hbcore_tf.mpi_ops (Horovod's module path) is their
public face; it also registers their gradients
(hbcore_tf._ops.collective_gradients).

Every collective is one ``HbcoreCollective`` / ``HbcoreAlltoall`` /
``HbcoreJoin`` / ``HbcoreBarrier`` op from the op library
(hbcore_tf._ops.library). The ops enqueue into the same C++ core that the
numpy API (:mod:`hbcore`) uses and return at once; the core's background
thread completes them. A grouped call is one op, so its tensors reach the
core in one ``hb_enqueue`` and negotiate and fuse together.

Tensor names (how the core matches tensors across ranks) come from
:mod:`hbcore_tf._ops.naming`: in graph mode from the op's name scope, in
eager mode from per-kind counters.

Errors: the ops raise ``tf.errors.FailedPreconditionError`` when ranks
disagree about a tensor, ``tf.errors.InvalidArgumentError`` for a bad
local argument (root rank, splits, dtype) and ``tf.errors.UnknownError``
(Horovod's type) once the runtime shut down on any rank. Calls before
:func:`init` raise ``ValueError`` (:class:`hbcore.NotInitializedError`) in
Python.
"""
import contextlib
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import hbcore
import tensorflow as tf
from hbcore import Adasum, Average, NotInitializedError, ReduceOp, Sum, size

from hbcore._native import core
from hbcore.ops import resolve_op as _resolve_op
from hbcore_tf._ops import naming as _naming
from hbcore_tf._ops.library import collectives_unordered as _collectives_unordered
from hbcore_tf._ops.library import lib as _lib
from hbcore_tf._ops.xla import check_not_xla
from hbcore_tf.compression import Compression
from hbcore_tf.process_sets import ProcessSet, global_process_set
from hbcore_tf.process_sets import process_set_id as _check_process_set

# Core op codes (hb_op_type in csrc/core/include/hbcore/c_api.h), as the
# core module exports them.
_ALLREDUCE = core.HB_ALLREDUCE
_ALLGATHER = core.HB_ALLGATHER
_BROADCAST = core.HB_BROADCAST
_ALLTOALL = core.HB_ALLTOALL
_REDUCESCATTER = core.HB_REDUCESCATTER

# The name every rank's join uses (the same as hbcore.join, so numpy and TF
# joins pair up).
_JOIN_NAME = "hbcore.join"

_NOT_INITIALIZED = "hbcore has not been initialized; use hvd.init()."

TensorLike = Union[tf.Tensor, tf.Variable, tf.IndexedSlices, Any]


# --- process -----------------------------------------------------------------

# autograph leaves these alone: inside a user's tf.function they run as
# the plain Python they are (they decide the ops to create from Python
# values, never from tensors), instead of being transpiled on every trace,
# which cost seconds per traced train step.
_plain_python = tf.autograph.experimental.do_not_convert


def init(comm: Any = None, process_sets: Any = None,
         config: Optional[Mapping[str, Any]] = None) -> None:
    """Initializes hbcore (idempotent): MPI, the core's communicator and its
    background thread.

    Args:
        comm: None (every rank of MPI_COMM_WORLD), a list of
            MPI_COMM_WORLD ranks, or an mpi4py communicator; see
            :func:`hbcore.init`.
        process_sets: None, a list of :class:`ProcessSet` (registered with
            ids 1, 2, ... besides the global set) or ``"dynamic"``; see
            :func:`hbcore.init`.
        config: knob name -> value, overriding HB_* / HOROVOD_* variables
            (an hbcore extension; see :func:`hbcore.init`).

    Raises:
        TypeError, ValueError: ``comm`` is not a valid communicator or list
            of ranks, ``config`` is not a mapping, or a process set is
            invalid or a duplicate.
        hbcore.exceptions.ConfigError: a ``config`` entry or an HB_* /
            HOROVOD_* variable is invalid.
    """
    hbcore.init(comm, process_sets, config=config)


# --- helpers -----------------------------------------------------------------

def _check_initialized() -> None:
    if not hbcore.is_initialized():
        raise NotInitializedError(_NOT_INITIALIZED)


def _refuse_xla(what: str) -> None:
    """A ValueError that says so when an op is being traced for XLA
    (``tf.function(jit_compile=True)``), where hbcore's ops have no kernel
    (TF's own error comes only when the function runs, and names an op).

    Raises:
        ValueError: the function being traced is compiled with XLA.
    """
    check_not_xla("hbcore's %s op" % what)


def _refuse_adasum(op: int, what: str) -> None:
    if op == Adasum:
        raise NotImplementedError(
            "hbcore does not implement the Adasum reduction (%s); use "
            "op=hvd.Average or hvd.Sum" % what)


def _as_tensor(value: Any) -> tf.Tensor:
    """``tf.convert_to_tensor(value)``, skipped for tensors (it costs about
    ten microseconds per eager call)."""
    return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(
        value)


def _on_device(device: str) -> Any:
    """``tf.device(device)``, or nothing for '' (default placement): the
    context manager costs microseconds on every eager call."""
    return tf.device(device) if device else contextlib.nullcontext()


# Whether the ops must run on the CPU although TensorFlow has GPUs: the op
# library registers GPU kernels, which hand GPU tensors to the core's NCCL
# backend; without NCCL (hbcore[gpu] not installed) the ops are pinned to
# the CPU instead, and TensorFlow copies the tensors there and back.
# Decided once per initialised runtime (None: not yet).
_host_only: Optional[bool] = None


def _placement() -> Any:
    """The device scope for a new hbcore op (see ``_host_only``)."""
    global _host_only
    host_only = _host_only
    if host_only is None:
        initialized = hbcore.is_initialized()
        host_only = bool(tf.config.list_logical_devices("GPU")) and not (
            initialized and core.nccl_built())
        if initialized:  # a graph built before init decides again later
            _host_only = host_only
    return tf.device("/CPU:0") if host_only else contextlib.nullcontext()


def _collective(tensors: Sequence[Any], op_code: int, kind: str,
                name: Optional[str], ignore_name_scope: bool = False,
                reduce_op: int = Sum, root_rank: int = 0,
                prescale_factor: float = 1.0,
                postscale_factor: float = 1.0,
                process_set_id: int = 0) -> List[tf.Tensor]:
    """One HbcoreCollective op over ``tensors`` (all announced together).

    A single tensor is named ``<name>``; a group ``<name>.0``, ``<name>.1``..
    """
    tensors = [_as_tensor(t) for t in tensors]
    if not tensors:
        return []
    eager = tf.executing_eagerly()
    if not eager:
        _refuse_xla(kind)
    with _naming.op_scope(_set_kind(kind, process_set_id), name,
                          ignore_name_scope, eager) as base, _placement():
        _collectives_unordered()
        outputs = _lib.hbcore_collective(
            tensors, _names_tensor(base, len(tensors), eager), op=op_code,
            reduce_op=int(reduce_op), root_rank=int(root_rank),
            prescale_factor=float(prescale_factor),
            postscale_factor=float(postscale_factor), eager=eager,
            process_set_id=process_set_id)
    return list(outputs)


# Eager string tensors of the names used so far (tf.constant costs tens of
# microseconds, a good part of an eager collective's latency). Bounded: a
# program that keeps making new names empties it now and then.
_EAGER_NAMES_MAX = 4096
_eager_names: Dict[Tuple[str, int], tf.Tensor] = {}


def _names_tensor(base: str, count: int, eager: bool) -> tf.Tensor:
    """The names input of one op over ``count`` tensors: a single tensor
    is named ``base``, a group ``base.0``, ``base.1``, ...; ``count`` 0
    gives the scalar name of an alltoall, barrier or join op."""
    if eager:
        key = (base, count)
        cached = _eager_names.get(key)
        if cached is not None:
            return cached
    names = (base if count == 0 else [base] if count == 1 else
             ["%s.%d" % (base, i) for i in range(count)])
    tensor = tf.constant(names, dtype=tf.string)
    if eager:
        if len(_eager_names) >= _EAGER_NAMES_MAX:
            _eager_names.clear()
        _eager_names[key] = tensor
    return tensor


def _name_scalar(name: str) -> tf.Tensor:
    """The scalar name input of an alltoall, barrier or join op."""
    return _names_tensor(name, 0, tf.executing_eagerly())


def _set_kind(kind: str, process_set_id: int) -> str:
    """The op kind for naming: each process set counts its unnamed eager
    calls apart, so calls on a set some ranks are not in leave the others'
    names in step."""
    return kind if not process_set_id else "%s_ps%d" % (kind, process_set_id)


_SPARSE_SCALE_ERROR = ("Pre/postscale_factor are not supported with "
                       "tf.IndexedSlices")


def _check_sparse_args(slices: Sequence[tf.IndexedSlices], op: int,
                       prescale_factor: float,
                       postscale_factor: float) -> None:
    """Refuses what Horovod 0.28 refuses for IndexedSlices, before any
    collective is created (so no rank submits half of a call).

    Raises:
        NotImplementedError: op is not Sum or Average, or a scale factor
            is not 1.0 (Horovod's type and message).
        TypeError: op is Average and some values have a dtype true
            division does not take (bool, string): Horovod's division
            raises the same type, but only after its allgathers exist.
    """
    if op not in (Sum, Average):
        raise NotImplementedError(
            "Only Sum and Average ops are supported with tf.IndexedSlices "
            "(got %s); pass sparse_as_dense=True or convert the gradient with "
            "tf.convert_to_tensor" % ReduceOp(op).name)
    if float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise NotImplementedError(_SPARSE_SCALE_ERROR)
    if op == Average:
        for s in slices:
            dtype = s.values.dtype
            if not (dtype.is_floating or dtype.is_complex or dtype.is_integer):
                raise TypeError(
                    "Average of tf.IndexedSlices divides the values by the "
                    "number of ranks; values of dtype %s cannot be divided "
                    "(use op=hvd.Sum or cast the values)" % dtype.name)


def _average_values(values: tf.Tensor, process_set_id: int = 0) -> tf.Tensor:
    """Gathered IndexedSlices values divided by the set's size with
    TensorFlow's true division, as Horovod does (``values / size``): the
    dtype of floating and complex values is kept; integer values come back
    as floating values (8- and 16-bit integers as float32, 32- and 64-bit
    as float64), so entries that share an index still add up to their
    exact average. Dense integer Average differs on purpose: it keeps the
    dtype and truncates the reduced sum toward zero (the core's rule, as
    Horovod's own dense allreduce)."""
    divisor = tf.cast(size() if not process_set_id else
                      _process_set_info(process_set_id)[0], values.dtype)
    return tf.math.truediv(values, divisor)


def _sparse_allreduce(slices: Sequence[tf.IndexedSlices], op: int,
                      name: Optional[str], ignore_name_scope: bool,
                      process_set_id: int = 0) -> List[tf.IndexedSlices]:
    """Allreduce of IndexedSlices as one grouped allgather of all values and
    indices (duplicate indices then sum up when the slices are applied).
    The arguments were checked by _check_sparse_args."""
    n = len(slices)
    gathered = _collective([s.values for s in slices] +
                           [s.indices for s in slices], _ALLGATHER,
                           "HbcoreSparseAllreduce", name, ignore_name_scope,
                           process_set_id=process_set_id)
    return [tf.IndexedSlices(_average_values(gathered[i], process_set_id)
                             if op == Average
                             else gathered[i],
                             gathered[n + i], dense_shape=s.dense_shape)
            for i, s in enumerate(slices)]


# --- allreduce -----------------------------------------------------------------

@_plain_python
def allreduce(tensor: TensorLike, average: Optional[bool] = None,
              device_dense: str = "", device_sparse: str = "",
              compression: type = Compression.none, op: Optional[int] = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              name: Optional[str] = None,
              process_set: ProcessSet = global_process_set,
              ignore_name_scope: bool = False) -> TensorLike:
    """Reduces a tensor over all ranks.

    A ``tf.IndexedSlices`` is reduced by allgathering its values and indices
    (so the result has every rank's slices; Average divides the values by
    size() with true division, as Horovod: integer values come back as
    float32 (8/16-bit) or float64 (32/64-bit) values, whereas a dense
    integer Average keeps its dtype and truncates toward zero).

    Args:
        tensor: tf.Tensor, tf.Variable or tf.IndexedSlices; same shape and
            dtype on every rank.
        average: deprecated; use ``op``.
        device_dense: device for dense tensors ('' = default placement).
        device_sparse: device for IndexedSlices.
        compression: Compression.none or Compression.fp16 (dense only).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        name: name matched across ranks (derived from the graph when None).
        process_set: the ranks it runs over (default: all); this rank
            must be a member.
        ignore_name_scope: leave enclosing name scopes out of the name.

    Returns:
        A tensor of the same shape and dtype, or a tf.IndexedSlices of
        the same dense shape (values of a floating dtype for an integer
        Average, see above).

    Raises:
        ValueError: hbcore is not initialized, or both average and op given.
        NotImplementedError: op is Adasum; or ``tensor`` is an
            IndexedSlices and op is Min/Max/Product or a scale factor is
            not 1.0 (as Horovod).
        TypeError: Average of an IndexedSlices of bool values.
        tf.errors.FailedPreconditionError: ranks disagree on the tensor.
        tf.errors.InvalidArgumentError: e.g. Average on bool.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    op = _resolve_op(average, op)
    _refuse_adasum(op, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_args([tensor], op, prescale_factor, postscale_factor)
        with _on_device(device_sparse):
            return _sparse_allreduce([tensor], op, name,
                                     ignore_name_scope, set_id)[0]
    with _on_device(device_dense):
        compressed, ctx = compression.compress(_as_tensor(tensor))
        reduced = _collective([compressed], _ALLREDUCE, "HbcoreAllreduce", name,
                              ignore_name_scope, op, 0, prescale_factor,
                              postscale_factor, set_id)[0]
        return compression.decompress(reduced, ctx)


# SageMaker data parallel's name for the same operation.
oob_allreduce = allreduce


@_plain_python
def grouped_allreduce(tensors: Sequence[TensorLike],
                      average: Optional[bool] = None, device_dense: str = "",
                      device_sparse: str = "",
                      compression: type = Compression.none,
                      op: Optional[int] = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set,
                      ignore_name_scope: bool = False,
                      name: Optional[str] = None) -> List[TensorLike]:
    """Reduces a list of tensors as one group: all dense tensors go to the
    core in one op, so they negotiate in one cycle and fuse; the
    IndexedSlices among them go through one grouped allgather.

    Args:
        tensors: tf.Tensor / tf.Variable / tf.IndexedSlices (no None).
        name: base name; dense tensors are named ``<name>.<i>``, the
            IndexedSlices group ``<name>_sparse``.
        Others: as in :func:`allreduce`.

    Returns:
        The reduced tensors, in input order.

    Raises:
        As :func:`allreduce`; an IndexedSlices in the group with an op,
        scale factor or dtype it does not support raises before any op is
        created.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    op = _resolve_op(average, op)
    _refuse_adasum(op, "grouped_allreduce")
    tensors = list(tensors)
    if not tensors:
        return tensors
    sparse_idx = [i for i, t in enumerate(tensors)
                  if isinstance(t, tf.IndexedSlices)]
    dense_idx = [i for i, t in enumerate(tensors)
                 if not isinstance(t, tf.IndexedSlices)]
    if sparse_idx:  # before the dense op exists: all or nothing
        _check_sparse_args([tensors[i] for i in sparse_idx], op,
                           prescale_factor, postscale_factor)
    out: List[Any] = [None] * len(tensors)
    if dense_idx:
        with _on_device(device_dense):
            pairs = [compression.compress(_as_tensor(tensors[i]))
                     for i in dense_idx]
            reduced = _collective([p[0] for p in pairs], _ALLREDUCE,
                                  "HbcoreGroupedAllreduce", name,
                                  ignore_name_scope, op, 0, prescale_factor,
                                  postscale_factor, set_id)
            for i, (_, ctx), value in zip(dense_idx, pairs, reduced):
                out[i] = compression.decompress(value, ctx)
    if sparse_idx:
        sparse_name = None if name is None else name + "_sparse"
        with _on_device(device_sparse):
            reduced = _sparse_allreduce([tensors[i] for i in sparse_idx], op,
                                        sparse_name, ignore_name_scope,
                                        set_id)
        for i, value in zip(sparse_idx, reduced):
            out[i] = value
    return out


# --- allgather / broadcast ------------------------------------------------------

@_plain_python
def allgather(tensor: TensorLike, name: Optional[str] = None,
              ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Concatenates ``tensor`` from every rank along the first dimension.

    Args:
        tensor: at least 1-D; the first dimension may differ across ranks,
            the others must match.
        name: name matched across ranks (derived from the graph when None).
        ignore_name_scope: leave enclosing name scopes out of the name.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.

    Returns:
        The rows of rank 0, then rank 1, and so on.

    Raises:
        tf.errors.FailedPreconditionError: dtype or trailing dimensions
            differ across ranks.
        tf.errors.InvalidArgumentError: ``tensor`` is a scalar.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    return _collective([tensor], _ALLGATHER, "HbcoreAllgather", name,
                       ignore_name_scope, process_set_id=set_id)[0]


@_plain_python
def grouped_allgather(tensors: Sequence[TensorLike],
                      name: Optional[str] = None,
                      ignore_name_scope: bool = False,
                      process_set: ProcessSet = global_process_set
                      ) -> List[tf.Tensor]:
    """Allgathers a list of tensors announced together (one op).

    Args:
        tensors: tensors of at least 1-D; for each, the first dimension
            may differ across ranks, the others must match.
        name: base name: several tensors are named ``<name>.<i>``, a
            single one ``<name>`` (derived from the graph when None).
        ignore_name_scope: leave enclosing name scopes out of the name.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.

    Returns:
        One gathered tensor per input, in input order (an empty list for
        no tensors).

    Raises:
        ValueError: hbcore is not initialized, or ``process_set`` is not
            registered.
        tf.errors.FailedPreconditionError: dtype or trailing dimensions
            differ across ranks.
        tf.errors.InvalidArgumentError: a tensor is a scalar.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    return _collective(list(tensors), _ALLGATHER, "HbcoreGroupedAllgather",
                       name, ignore_name_scope, process_set_id=set_id)


@_plain_python
def broadcast(tensor: TensorLike, root_rank: int, name: Optional[str] = None,
              ignore_name_scope: bool = False,
              process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Returns ``root_rank``'s ``tensor`` on every rank.

    Args:
        tensor: same shape and dtype on every rank.
        root_rank: rank whose value is sent to all others.
        name: name matched across ranks (derived from the graph when None).
        ignore_name_scope: leave enclosing name scopes out of the name.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.

    Returns:
        A tensor of the same shape and dtype holding ``root_rank``'s value.

    Raises:
        ValueError: hbcore is not initialized, or ``process_set`` is not
            registered.
        tf.errors.InvalidArgumentError: ``root_rank`` is not in [0, size()).
        tf.errors.FailedPreconditionError: shape, dtype or root differ
            across ranks.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    return _collective([tensor], _BROADCAST, "HbcoreBroadcast", name,
                       ignore_name_scope, root_rank=root_rank,
                       process_set_id=set_id)[0]


@_plain_python
def broadcast_(variables: Sequence[Any], root_rank: int,
               name: Optional[str] = None,
               process_set: ProcessSet = global_process_set) -> List[Any]:
    """Overwrites ``variables`` with ``root_rank``'s values (one grouped
    broadcast, then an assign per variable).

    Args:
        variables: tf.Variable / Keras variables.
        root_rank: rank whose values are kept.
        name: base name matched across ranks.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.

    Returns:
        Eagerly, the variables; in a graph, the assign results (tensors that
        read the variables after the assignment).
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return []
    values = _collective(variables, _BROADCAST, "HbcoreBroadcastInplace",
                         name, root_rank=root_rank, process_set_id=set_id)
    assigned = [v.assign(x) for v, x in zip(variables, values)]
    return variables if tf.executing_eagerly() else assigned


# --- alltoall / reducescatter ---------------------------------------------------

def _splits_tensor(splits: Any) -> tf.Tensor:
    """The int64 vector the alltoall op takes, from integer ``splits``.

    Args:
        splits: a list, array or tensor of integer row counts.

    Returns:
        ``splits`` flattened and cast to int64.

    Raises:
        TypeError: ``splits`` does not have an integer dtype.
    """
    splits = _as_tensor(splits)
    if not splits.dtype.is_integer:
        raise TypeError(
            "alltoall splits must be integers (row counts per rank), got "
            "dtype %s" % splits.dtype.name)
    return tf.cast(tf.reshape(splits, [-1]), tf.int64)


@_plain_python
def alltoall(tensor: TensorLike, splits: Optional[Any] = None,
             name: Optional[str] = None, ignore_name_scope: bool = False,
             process_set: ProcessSet = global_process_set) -> Any:
    """Sends ``splits[r]`` rows of ``tensor`` to rank r and returns the rows
    every rank sent here, concatenated in rank order.

    Args:
        tensor: at least 1-D.
        splits: rows for each rank (length size(), sums to the first
            dimension); None splits the first dimension evenly.
        name: name matched across ranks (derived from the graph when None).
        ignore_name_scope: leave enclosing name scopes out of the name.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.

    Returns:
        The received tensor; when ``splits`` is given, a tuple of it and the
        int32 vector of rows received from each rank (as Horovod).

    Raises:
        TypeError: ``splits`` is not of an integer dtype (Horovod's op
            takes int32 splits only; a float row count would otherwise be
            truncated without notice).
        tf.errors.InvalidArgumentError: splits of the wrong length or sum,
            a negative split, or an uneven first dimension without splits.
    """
    output, received = alltoall_int64_splits(
        tensor, splits, name, ignore_name_scope, process_set)
    if splits is None:
        return output
    return output, tf.cast(received, tf.int32)


def alltoall_int64_splits(tensor: TensorLike, splits: Optional[Any],
                          name: Optional[str], ignore_name_scope: bool,
                          process_set: ProcessSet = global_process_set
                          ) -> Tuple[Any, Any]:
    """:func:`alltoall` returning the op's own int64 received splits
    always: the sharded embedding exchange counts rows in int64.

    Args, Raises: as :func:`alltoall`.

    Returns:
        The received tensor and the int64 rows received from each rank.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    tensor = tf.convert_to_tensor(tensor)
    splits_tensor = (tf.zeros([0], tf.int64) if splits is None else
                     _splits_tensor(splits))
    _refuse_xla("HbcoreAlltoall")
    with _naming.op_scope(_set_kind("HbcoreAlltoall", set_id), name,
                          ignore_name_scope) as op_name, _placement():
        _collectives_unordered()
        output, received = _lib.hbcore_alltoall(
            tensor, splits_tensor, _name_scalar(op_name),
            eager=tf.executing_eagerly(), process_set_id=set_id)
    return output, received


@_plain_python
def reducescatter(tensor: TensorLike, device_dense: str = "",
                  compression: type = Compression.none, op: int = Average,
                  name: Optional[str] = None,
                  process_set: ProcessSet = global_process_set,
                  ignore_name_scope: bool = False,
                  prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> tf.Tensor:
    """Reduces ``tensor`` over all ranks and returns this rank's block of
    rows: with n rows and s ranks, rank r gets n // s rows, plus one when
    r < n % s.

    Args:
        tensor: at least 1-D, same shape and dtype on every rank.
        device_dense: device for the op ('' = default placement).
        compression: Compression.none or Compression.fp16.
        op: Average (default), Sum, Min, Max or Product.
        name: name matched across ranks (derived from the graph when None).
        process_set: the ranks it runs over (default: all); this rank
            must be a member.
        ignore_name_scope: leave enclosing name scopes out of the name.
        prescale_factor, postscale_factor: as in :func:`allreduce`.

    Raises:
        NotImplementedError: op is Adasum.
        tf.errors.FailedPreconditionError: ranks disagree on the tensor.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    op = Average if op is None else ReduceOp(int(op))
    _refuse_adasum(op, "reducescatter")
    with _on_device(device_dense):
        compressed, ctx = compression.compress(_as_tensor(tensor))
        reduced = _collective([compressed], _REDUCESCATTER,
                              "HbcoreReducescatter", name, ignore_name_scope,
                              op, 0, prescale_factor, postscale_factor,
                              set_id)[0]
        return compression.decompress(reduced, ctx)


@_plain_python
def grouped_reducescatter(tensors: Sequence[TensorLike],
                          device_dense: str = "",
                          compression: type = Compression.none,
                          op: int = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0,
                          name: Optional[str] = None,
                          ignore_name_scope: bool = False) -> List[tf.Tensor]:
    """Reducescatters a list of tensors announced together (one op).

    Args:
        tensors: tensors of at least 1-D, each with the same shape and
            dtype on every rank.
        device_dense: device for the op ('' = default placement).
        compression: Compression.none or Compression.fp16.
        op: Average (default), Sum, Min, Max or Product.
        process_set: the ranks it runs over (default: all); this rank
            must be a member.
        prescale_factor, postscale_factor: as in :func:`allreduce`.
        name: base name: several tensors are named ``<name>.<i>``, a
            single one ``<name>`` (derived from the graph when None).
        ignore_name_scope: leave enclosing name scopes out of the name.

    Returns:
        This rank's block of each reduced tensor, in input order (an empty
        list for no tensors).

    Raises:
        ValueError: hbcore is not initialized, ``process_set`` is not
            registered, or ``op`` is not a reduce op.
        NotImplementedError: op is Adasum.
        tf.errors.FailedPreconditionError: ranks disagree on a tensor.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    op = Average if op is None else ReduceOp(int(op))
    _refuse_adasum(op, "grouped_reducescatter")
    tensors = list(tensors)
    if not tensors:
        return tensors
    with _on_device(device_dense):
        pairs = [compression.compress(_as_tensor(t))
                 for t in tensors]
        reduced = _collective([p[0] for p in pairs], _REDUCESCATTER,
                              "HbcoreGroupedReducescatter", name,
                              ignore_name_scope, op, 0, prescale_factor,
                              postscale_factor, set_id)
        return [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]


# --- synchronization ------------------------------------------------------------

@_plain_python
def join() -> tf.Tensor:
    """Declares that this rank has no more data. Until every rank joined,
    this rank takes part in the other ranks' allreduces with zeros (and in
    allgathers with no rows).

    Returns:
        An int32 scalar tensor: the rank that joined last.
    """
    _check_initialized()
    _refuse_xla("HbcoreJoin")
    return _lib.hbcore_join(_name_scalar(_JOIN_NAME))


@_plain_python
def barrier(process_set: ProcessSet = global_process_set,
            name: Optional[str] = None) -> Optional[tf.Operation]:
    """Waits until every rank reached the barrier.

    Args:
        process_set: the ranks that wait for each other (default: all);
            this rank must be a member.
        name: name matched across ranks (derived from the graph when None).

    Returns:
        None eagerly; in a graph, the op to run.

    Raises:
        ValueError: hbcore is not initialized, or ``process_set`` is not
            registered.
    """
    _check_initialized()
    set_id = _check_process_set(process_set)
    _refuse_xla("HbcoreBarrier")
    with _naming.op_scope(_set_kind("HbcoreBarrier", set_id),
                          name) as op_name:
        return _lib.hbcore_barrier(_name_scalar(op_name),
                                   process_set_id=set_id)


# --- topology ops ---------------------------------------------------------------
# Read when the op runs, so a graph may be built before init() or elsewhere.

def size_op(process_set_id: int = 0, name: Optional[str] = None) -> tf.Tensor:
    """An int32 scalar op: the number of ranks, read at execution time (for
    a process set other than the global one: its size when the op is
    created).

    Args:
        process_set_id: id of the process set (0, the default: the global
            set).
        name: name of the op in the graph.

    Returns:
        An int32 scalar tensor.

    Raises:
        ValueError: ``process_set_id`` is not a registered set, or it is
            not 0 and hbcore is not initialized.
    """
    if process_set_id != 0:
        return tf.constant(_process_set_info(process_set_id)[0], tf.int32,
                           name=name)
    return _lib.hbcore_topology(what="size", name=name)


def _process_set_info(process_set_id: int) -> tuple:
    _check_initialized()
    info = core.process_set_info(int(process_set_id))
    if info is None:
        raise ValueError("Process set does not exist or has not been "
                         "registered.")
    return info


def _topology_op(what: str, meaning: str) -> Callable[..., tf.Tensor]:
    """Makes the public op function ``<what>_op`` (Horovod's ``rank_op``,
    ``local_rank_op``, ``local_size_op``): an int32 scalar op that reads
    the runtime's ``what`` when it runs, not when the graph is built.

    Args:
        what: the value the op kernel reads ("rank", "local_rank",
            "local_size").
        meaning: what the value is, for the docstring.

    Returns:
        A function ``(name=None) -> tf.Tensor``.
    """
    def topology_op(name: Optional[str] = None) -> tf.Tensor:
        return _lib.hbcore_topology(what=what, name=name)

    topology_op.__name__ = topology_op.__qualname__ = what + "_op"
    topology_op.__doc__ = """An int32 scalar op: %s.

    Args:
        name: name of the op in the graph.

    Returns:
        An int32 scalar tensor, read when the op runs.
    """ % meaning
    return topology_op


local_size_op = _topology_op("local_size", "the number of ranks on this host")
rank_op = _topology_op("rank", "this process's rank, read at execution time")
local_rank_op = _topology_op("local_rank", "this process's rank on its host")


def process_set_included_op(process_set_id: int = 0,
                            name: Optional[str] = None) -> tf.Tensor:
    """An int32 scalar op: 1 if this rank belongs to the process set, else 0
    (as of when the op is created).

    Args:
        process_set_id: id of the process set (0, the default: the global
            set).
        name: name of the op in the graph.

    Returns:
        An int32 scalar constant tensor.

    Raises:
        ValueError: hbcore is not initialized, or ``process_set_id`` is not
            a registered set.
    """
    info = _process_set_info(process_set_id)
    return tf.constant(1 if info[1] >= 0 else 0, tf.int32, name=name)
