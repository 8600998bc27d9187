"""Collectives on numpy arrays, with the names, defaults and semantics of
horovod.torch. Every collective has an ``_async`` twin returning a
:class:`Handle` for :func:`synchronize` / :func:`poll`; ``allreduce_`` and
``broadcast_`` work in place.

Tensors are matched across ranks by name. Unnamed calls get
``<op>.noname.<n>``, which is rank-consistent only when every rank issues
its unnamed calls in the same order (as in Horovod).

Inputs are numpy arrays, anything ``numpy.asarray`` reads, or tensors of
other frameworks through DLPack (objects with ``__dlpack__`` and
``__dlpack_device__``): host tensors take the numpy path and give numpy
results; CUDA tensors (PyTorch, CuPy, JAX, TensorFlow) are reduced on
their GPU and the results come back as tensors of the input's framework
on the same device (or as :class:`hbcore.GpuArray` where the framework
cannot take them). hbcore._dlpack states the rules: streams, layouts,
dtypes, in-place operations. A grouped call takes host tensors or GPU
tensors, not both.
"""
import enum
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import sys
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from hbcore import _dlpack
from hbcore._native import core
from hbcore.exceptions import InvalidArgumentError
from hbcore.process_sets import ProcessSet, global_process_set
from hbcore.process_sets import process_set_id as _set_id


class ReduceOp(enum.IntEnum):
    """Reduction operations (Horovod's numbering, hb_reduce_op in c_api.h)."""
    AVERAGE = core.HB_REDUCE_AVERAGE
    SUM = core.HB_REDUCE_SUM
    ADASUM = core.HB_REDUCE_ADASUM
    MIN = core.HB_REDUCE_MIN
    MAX = core.HB_REDUCE_MAX
    PRODUCT = core.HB_REDUCE_PRODUCT


Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT

# Core op codes (hb_op_type in c_api.h, exported by the core module).
_ALLREDUCE = core.HB_ALLREDUCE
_ALLGATHER = core.HB_ALLGATHER
_BROADCAST = core.HB_BROADCAST
_ALLTOALL = core.HB_ALLTOALL
_REDUCESCATTER = core.HB_REDUCESCATTER
_BARRIER = core.HB_BARRIER
_JOIN = core.HB_JOIN

_DTYPE_CODES: Dict[Any, int] = {
    np.dtype(np.uint8): core.HB_UINT8, np.dtype(np.int8): core.HB_INT8,
    np.dtype(np.uint16): core.HB_UINT16, np.dtype(np.int16): core.HB_INT16,
    np.dtype(np.int32): core.HB_INT32, np.dtype(np.int64): core.HB_INT64,
    np.dtype(np.float16): core.HB_FLOAT16,
    np.dtype(np.float32): core.HB_FLOAT32,
    np.dtype(np.float64): core.HB_FLOAT64, np.dtype(np.bool_): core.HB_BOOL,
}
core.register_dtypes(list(_DTYPE_CODES.items()))


# bfloat16 arrays come from ml_dtypes (installed with TensorFlow), whose
# import costs about a second (0.7.0 on the 2-core machine): more than
# numpy and hbcore.init() together, paid again by every new process of
# an elastic re-formation.  A numpy bfloat16 array can exist only once
# ml_dtypes is imported, so hbcore registers the dtype with the core
# then: now if it already is, else right after someone imports it (a
# finder on sys.meta_path that wraps the module's exec), and before a
# DLPack tensor is taken (a framework's tensor may be bfloat16, and its
# result needs the numpy dtype).  register_dtypes runs under the GIL,
# as does every lookup in the table, so a registration from another
# thread is never seen half done.
_bfloat16_registered = False


def _register_bfloat16(ml_dtypes: Any) -> None:
    """Adds bfloat16 to the core's dtype table (once).

    Args:
        ml_dtypes: The imported ml_dtypes module.
    """
    global _bfloat16_registered
    if not _bfloat16_registered:
        _DTYPE_CODES[np.dtype(ml_dtypes.bfloat16)] = core.HB_BFLOAT16
        core.register_dtypes(list(_DTYPE_CODES.items()))
        _bfloat16_registered = True


def _use_bfloat16() -> None:
    """Registers bfloat16 if ml_dtypes is installed (imports it)."""
    if not _bfloat16_registered:
        try:
            import ml_dtypes
        except ImportError:  # pragma: no cover - bfloat16 then unsupported
            return
        _register_bfloat16(ml_dtypes)


class _AfterMlDtypesImport(importlib.abc.MetaPathFinder):
    """Registers bfloat16 as soon as ``import ml_dtypes`` has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        """The other finders' spec of ml_dtypes, its exec wrapped.

        Args:
            name: The module being imported.
            path, target: Unused (the other finders get ``name`` alone).

        Returns:
            None for any other module (the next finder answers).
        """
        if name != "ml_dtypes":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one import only; no recursion
        spec = importlib.util.find_spec(name)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            _register_bfloat16(module)
        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if "ml_dtypes" in sys.modules:
    _register_bfloat16(sys.modules["ml_dtypes"])
else:
    sys.meta_path.insert(0, _AfterMlDtypesImport())

# What a handle's wait() returns (ResultKind in csrc/python/module.cc).
_GIVEN = core.RESULT_GIVEN
_OUTPUT = core.RESULT_OUTPUT
_OUTPUT_AND_SPLITS = core.RESULT_OUTPUT_AND_SPLITS
_OUTPUTS = core.RESULT_OUTPUTS
_NOTHING = core.RESULT_NONE
_LAST_JOINED_RANK = core.RESULT_LAST_JOINED_RANK

_JOIN_NAME = "hbcore.join"
_counters: Dict[str, "itertools.count[int]"] = {}
_counters_lock = threading.Lock()


# An operation in flight, returned by every ``_async`` call: pass it to
# synchronize() or poll(). Implemented in C++ so that submitting and waiting
# on one tensor costs Python as little as possible.
Handle = core.Handle


def auto_name(prefix: str, name: Optional[str] = None,
              process_set_id: int = 0) -> str:
    """Returns ``name``, or ``<prefix>.noname.<n>`` from a counter.

    The per-prefix counter is shared by hbcore_tf's eager calls; the names
    are rank-consistent only when every rank makes its unnamed calls in the
    same order, as in Horovod. Each process set counts on its own
    (``<prefix>.ps<id>.noname.<n>``), so calls on a set that some ranks
    are not in leave the others' names in step.

    Args:
        prefix: the operation, e.g. ``"allreduce"``.
        name: the caller's name; returned unchanged when not None.
        process_set_id: the core's id of the process set (default 0, the
            global set, adds no ``.ps<id>`` part).

    Returns:
        The tensor name to submit.
    """
    if name is not None:
        return name
    if process_set_id:
        prefix = "%s.ps%d" % (prefix, process_set_id)
    with _counters_lock:
        counter = _counters.get(prefix)
        if counter is None:
            counter = _counters[prefix] = itertools.count()
        return "%s.noname.%d" % (prefix, next(counter))


def _as_input(tensor: Any, fn: str) -> _dlpack.Input:
    """A C-contiguous numpy array, or a DlpackInput for a GPU tensor."""
    if isinstance(tensor, np.ndarray):  # the common case, fast
        return np.asarray(tensor, order="C")  # keeps 0-d arrays 0-d
    if not _bfloat16_registered and _dlpack.dlpack_device(tensor):
        _use_bfloat16()  # a framework's tensor may be bfloat16
    return _dlpack.as_input(tensor, fn)


def _as_inplace(tensor: Any, fn: str) -> _dlpack.Input:
    """The buffer an in-place operation writes: ``tensor`` itself (numpy),
    a view of its host memory, or a DlpackInput of its device memory."""
    array = tensor
    if not isinstance(tensor, np.ndarray):
        if not _bfloat16_registered and _dlpack.dlpack_device(tensor):
            _use_bfloat16()  # a framework's tensor may be bfloat16
        array = _dlpack.as_inplace(tensor, fn)
        if array is None:
            raise InvalidArgumentError(
                "%s works in place and needs a numpy array or a DLPack "
                "tensor, got %s" % (fn, type(tensor).__name__))
        if _dlpack.is_device(array):
            return array
    flags = array.flags
    if not flags.c_contiguous or not flags.writeable:
        raise InvalidArgumentError("%s needs a C-contiguous, writeable array"
                                   % fn)
    return array


# The out-of-place calls' new host arrays (csrc/python/host_outputs.h):
# from min_pooled_bytes up they reuse the memory of dropped earlier outputs
# instead of fresh pages, which cost a page fault and zeroing per page.
_HOST_OUTPUTS = core.HostOutputPool()
_POOLED_BYTES = core.HostOutputPool.min_pooled_bytes


def _new_host_array(array: np.ndarray) -> np.ndarray:
    """An uninitialized array of ``array``'s shape and dtype."""
    if array.nbytes < _POOLED_BYTES:
        return np.empty_like(array)
    return _HOST_OUTPUTS.empty(array.shape, array.dtype)


def _empty_like(array: _dlpack.Input) -> Any:
    """An output buffer for ``array``: host or device memory."""
    if isinstance(array, np.ndarray):
        return _new_host_array(array)
    return _dlpack.empty_like(array)


def _group_inputs(tensors: Sequence[Any], fn: str) -> List[_dlpack.Input]:
    """The inputs of a grouped call, all host or all GPU.

    Raises:
        InvalidArgumentError: the group mixes host and GPU tensors.
    """
    arrays = [_as_input(t, fn) for t in tensors]
    _check_one_kind(arrays, fn)
    return arrays


def _check_one_kind(arrays: Sequence[_dlpack.Input], fn: str) -> None:
    kinds = [_dlpack.is_device(a) for a in arrays]
    if any(kinds) and not all(kinds):
        raise InvalidArgumentError(
            "%s takes host tensors or GPU tensors, not both: tensor %d is "
            "in host memory, tensor %d on a GPU" % (
                fn, kinds.index(False), kinds.index(True)))


def _finish(tensor: Any, array: _dlpack.Input, pair: bool = False
            ) -> Optional[Callable[[Any], Any]]:
    """What the handle applies to a result: for a GPU input, the hand-back
    into ``tensor``'s framework (of the first item when ``pair``); None
    for host inputs (numpy results stay as they are)."""
    if isinstance(array, np.ndarray):
        return None
    convert = _dlpack.converter(tensor)
    if pair:
        return lambda result: (convert(result[0]),) + tuple(result[1:])
    return convert


def _finish_all(tensors: Sequence[Any], arrays: Sequence[_dlpack.Input]
                ) -> Optional[Callable[[Any], Any]]:
    """_finish for the list result of a grouped call."""
    if not arrays or isinstance(arrays[0], np.ndarray):
        return None
    return _dlpack.convert_all(tensors)


def resolve_op(average: Optional[bool], op: Optional[int]) -> ReduceOp:
    """Horovod's handling of the deprecated ``average`` argument.

    Shared by hbcore_tf. A given ``average`` warns (DeprecationWarning)
    and means Average when true, Sum when false.

    Args:
        average: deprecated; None when not given.
        op: a ReduceOp or its int value; None means Average.

    Returns:
        The ReduceOp to submit.

    Raises:
        ValueError: both ``average`` and ``op`` were given, or ``op`` is
            not a ReduceOp value.
    """
    if average is None:  # the common cases, fast
        if type(op) is ReduceOp:
            return op
        if op is None:
            return Average
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide "
                         "only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    return op if isinstance(op, ReduceOp) else ReduceOp(int(op))


# core.submit_one(name, op, reduce_op, input, output, root_rank, prescale,
# postscale, splits, allocate, result_kind, result, process_set_id[,
# finish]) enqueues one request and returns its Handle, whose wait()
# returns ``result`` or what ``result_kind`` names (passed through
# ``finish`` once, when given: GPU results go back to the input's
# framework); core.submit(requests, result_kind, result, process_set_id[,
# finish]) does the same for a group, each request a tuple of those first
# 10 fields (_request). Single-tensor calls pass the fields positionally:
# that is their hot path. The C++ side checks dtypes and applies
# int()/float() to the numbers; inputs must be C-contiguous arrays or
# DlpackInputs (_as_input), outputs writeable arrays (_as_inplace,
# np.empty_like) or device buffers (_dlpack.empty_like). ``allocate`` is
# false when the output is given, else the core allocates the output once
# its shape is negotiated: on the input's device, and for host inputs of
# min_pooled_bytes or more from the pool it names (_HOST_OUTPUTS; True
# would malloc them).
_submit_one = core.submit_one
_submit = core.submit


def _request(name: str, op: int, array: _dlpack.Input,
             output: Optional[Any] = None, reduce_op: int = Sum,
             prescale: float = 1.0, postscale: float = 1.0,
             allocate: Any = False) -> tuple:
    """One member of a group for core.submit (allocate: False, or the
    pool host outputs come from, as for core.submit_one)."""
    return (name, op, reduce_op, array, output, 0, prescale, postscale, None,
            allocate)


def synchronize(handle: Handle, timeout: Optional[float] = None) -> Any:
    """Waits for an ``_async`` operation and returns its result.

    Args:
        handle: what the ``_async`` call returned.
        timeout: seconds to wait at most; None waits as long as it takes.

    Returns:
        The operation's result (see the blocking twin of the call).

    Raises:
        WaitTimeoutError: (a ``TimeoutError``) ``timeout`` passed first. The
            operation is not cancelled: synchronize or ``handle.wait()``
            again for its result.
        ValueError: ``timeout`` is negative, infinite or NaN.
        MismatchError: ranks disagreed about the tensor.
        ShutdownError: the runtime shut down before it completed.
    """
    if timeout is None:
        return handle.wait()
    return handle.wait(timeout)


def poll(handle: Handle) -> bool:
    """Whether the operation finished (``synchronize`` won't block).

    Do not spin on it: a loop of ``poll`` keeps a core busy that the
    background thread needs to run the collective. With as many ranks as
    cores (2 ranks on 2 cores) a busy ``while not poll(h): pass`` was
    measured at 7.7 ms per 4-byte allreduce against tens of microseconds
    with ``synchronize``. Poll between pieces of real work, or wait.

    Args:
        handle: from an ``*_async`` call, not yet synchronized.

    Returns:
        True when the operation finished (successfully or not).
    """
    return handle.poll()


# --- allreduce -------------------------------------------------------------

def allreduce_async(tensor: Any, average: Optional[bool] = None,
                    name: Optional[str] = None, op: Optional[int] = None,
                    prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an allreduce of ``tensor`` into a new array; see allreduce.

    Args:
        tensor: array of the same shape and dtype on every rank (as
            allreduce).
        average: deprecated; use ``op``.
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what allreduce returns and
        raises the errors found during the collective (MismatchError,
        ShutdownError).

    Raises:
        ValueError: both ``average`` and ``op`` were given, or
            ``process_set`` is not registered.
        InvalidArgumentError: as allreduce, checked here before any
            communication; DuplicateNameError (a subclass) when a tensor
            of that name is still in flight on this rank.
        UnsupportedError: as allreduce, or the Adasum op.
        NotInitializedError: before init.
        ShutdownError: the runtime has already shut down.
    """
    reduce_op = resolve_op(average, op)
    set_id = _set_id(process_set)
    array = _as_input(tensor, "allreduce")
    if isinstance(array, np.ndarray):
        out = _new_host_array(array)
        return _submit_one(auto_name("allreduce", name, set_id), _ALLREDUCE,
                           reduce_op, array, out, 0, prescale_factor,
                           postscale_factor, None, False, _GIVEN, out, set_id)
    out = _dlpack.empty_like(array)
    return _submit_one(auto_name("allreduce", name, set_id), _ALLREDUCE,
                       reduce_op, array, out, 0, prescale_factor,
                       postscale_factor, None, False, _GIVEN, out, set_id,
                       _dlpack.converter(tensor))


def allreduce(tensor: Any, average: Optional[bool] = None,
              name: Optional[str] = None, op: Optional[int] = None,
              prescale_factor: float = 1.0,
              postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Reduces ``tensor`` over all ranks.

    Args:
        tensor: array of the same shape and dtype on every rank: numpy,
            anything numpy.asarray reads, or a DLPack tensor in host or
            CUDA memory (see the module doc).
        average: deprecated; use ``op``.
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all); this rank must
            be a member. Average divides by the set's size.

    Returns:
        A new array with the reduced values: numpy for host inputs; for a
        CUDA tensor, a tensor of its framework on its device (or a
        :class:`hbcore.GpuArray`).

    Raises:
        MismatchError: shape, dtype, op or scale factors differ across ranks.
        InvalidArgumentError: the request is malformed on this rank (for
            GPU tensors also: not C-contiguous, an unsupported DLPack
            dtype), or this rank is not a member of ``process_set``.
        UnsupportedError: a GPU tensor, but this runtime has no GPU support
            (the message names the missing library), or memory of a device
            type hbcore does not serve.
    """
    return synchronize(allreduce_async(tensor, average, name, op,
                                       prescale_factor, postscale_factor,
                                       process_set))


def allreduce_async_(tensor: np.ndarray, average: Optional[bool] = None,
                     name: Optional[str] = None, op: Optional[int] = None,
                     prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an in-place allreduce of ``tensor``; see allreduce_.

    Args:
        tensor: the array the result is written into (as allreduce_).
        average: deprecated; use ``op``.
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns ``tensor`` itself.

    Raises:
        InvalidArgumentError: as allreduce_async, or ``tensor`` cannot be
            written in place (see allreduce_).
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    reduce_op = resolve_op(average, op)
    set_id = _set_id(process_set)
    array = _as_inplace(tensor, "allreduce_")
    return _submit_one(auto_name("allreduce", name, set_id), _ALLREDUCE,
                       reduce_op, array, array, 0, prescale_factor,
                       postscale_factor, None, False, _GIVEN, tensor, set_id)


def allreduce_(tensor: np.ndarray, average: Optional[bool] = None,
               name: Optional[str] = None, op: Optional[int] = None,
               prescale_factor: float = 1.0,
               postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Like allreduce, but writes the result into ``tensor`` and returns it.

    ``tensor`` is a C-contiguous, writeable numpy array or a DLPack tensor
    whose memory hbcore may write (host memory numpy can view writeable,
    or CUDA memory not flagged read-only).

    Args:
        tensor: the input, overwritten with the result.
        average: deprecated; use ``op``.
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        ``tensor``, holding the reduced values.

    Raises:
        InvalidArgumentError: as allreduce, or ``tensor`` is neither a
            numpy array nor a DLPack tensor, is not C-contiguous or is not
            writeable.
        MismatchError, UnsupportedError: as allreduce.
    """
    return synchronize(allreduce_async_(tensor, average, name, op,
                                        prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async(tensors: Sequence[Any],
                            average: Optional[bool] = None,
                            name: Optional[str] = None,
                            op: Optional[int] = None,
                            prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an allreduce of several tensors negotiated together.

    Args:
        tensors: the tensors, all in host memory or all on GPUs (each as
            for allreduce).
        average: deprecated; use ``op``.
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the inputs before the reduction.
        postscale_factor: multiplies the results after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what grouped_allreduce
        returns.

    Raises:
        InvalidArgumentError: as allreduce_async, or the group mixes host
            and GPU tensors.
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    reduce_op = resolve_op(average, op)
    set_id = _set_id(process_set)
    base = auto_name("grouped_allreduce", name, set_id)
    arrays = _group_inputs(tensors, "grouped_allreduce")
    outs = [_empty_like(a) for a in arrays]
    reqs = [_request("%s.%d" % (base, i), _ALLREDUCE, a, o, reduce_op,
                     prescale=prescale_factor, postscale=postscale_factor)
            for i, (a, o) in enumerate(zip(arrays, outs))]
    return _submit(reqs, _GIVEN, outs, set_id, _finish_all(tensors, arrays))


def grouped_allreduce(tensors: Sequence[Any], average: Optional[bool] = None,
                      name: Optional[str] = None, op: Optional[int] = None,
                      prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> List[np.ndarray]:
    """Allreduces a list of tensors as one group: they are announced in the
    same negotiation cycle and fused together.

    Args:
        tensors: the tensors, all in host memory or all on GPUs (each as
            for allreduce).
        average: deprecated; use ``op``.
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the inputs before the reduction.
        postscale_factor: multiplies the results after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A list of reduced arrays, in input order (GPU inputs: as
        allreduce).

    Raises:
        InvalidArgumentError: as allreduce, or the group mixes host and
            GPU tensors.
    """
    return synchronize(grouped_allreduce_async(
        tensors, average, name, op, prescale_factor, postscale_factor,
        process_set))


def grouped_allreduce_async_(tensors: Sequence[np.ndarray],
                             average: Optional[bool] = None,
                             name: Optional[str] = None,
                             op: Optional[int] = None,
                             prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> Handle:
    """In-place twin of grouped_allreduce_async.

    Args:
        tensors: the tensors written in place (each as for allreduce_),
            all in host memory or all on GPUs.
        average: deprecated; use ``op``.
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the inputs before the reduction.
        postscale_factor: multiplies the results after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns the list of ``tensors``.

    Raises:
        InvalidArgumentError: as grouped_allreduce_async, or a tensor
            cannot be written in place (see allreduce_).
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    reduce_op = resolve_op(average, op)
    set_id = _set_id(process_set)
    base = auto_name("grouped_allreduce", name, set_id)
    arrays = [_as_inplace(t, "grouped_allreduce_") for t in tensors]
    _check_one_kind(arrays, "grouped_allreduce_")
    reqs = [_request("%s.%d" % (base, i), _ALLREDUCE, a, a, reduce_op,
                     prescale=prescale_factor, postscale=postscale_factor)
            for i, a in enumerate(arrays)]
    return _submit(reqs, _GIVEN, list(tensors), set_id)


def grouped_allreduce_(tensors: Sequence[np.ndarray],
                       average: Optional[bool] = None,
                       name: Optional[str] = None, op: Optional[int] = None,
                       prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> List[np.ndarray]:
    """In-place twin of grouped_allreduce.

    Args:
        tensors: the tensors, overwritten with the results (each as for
            allreduce_), all in host memory or all on GPUs.
        average: deprecated; use ``op``.
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the inputs before the reduction.
        postscale_factor: multiplies the results after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        The list of ``tensors``, holding the reduced values.

    Raises:
        InvalidArgumentError: as grouped_allreduce_async_.
        MismatchError, UnsupportedError: as allreduce.
    """
    return synchronize(grouped_allreduce_async_(
        tensors, average, name, op, prescale_factor, postscale_factor,
        process_set))


# --- allgather / broadcast -------------------------------------------------

def allgather_async(tensor: Any, name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an allgather; see allgather.

    Args:
        tensor: array with at least one dimension (as allgather).
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what allgather returns.

    Raises:
        InvalidArgumentError: ``tensor`` is a scalar, or as
            allreduce_async.
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    set_id = _set_id(process_set)
    array = _as_input(tensor, "allgather")
    return _submit_one(auto_name("allgather", name, set_id), _ALLGATHER, Sum,
                       array, None, 0, 1.0, 1.0, None, _HOST_OUTPUTS, _OUTPUT,
                       None, set_id, _finish(tensor, array))


def allgather(tensor: Any, name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Concatenates ``tensor`` from every rank along the first dimension.

    The first dimension may differ across ranks; the others must match.

    Args:
        tensor: array with at least one dimension: numpy, anything
            numpy.asarray reads, or a DLPack tensor (as allreduce).
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        An array with the rows of rank 0, then rank 1, and so on (the
        members of ``process_set``, in rank order); GPU inputs: as
        allreduce.

    Raises:
        MismatchError: dtype or trailing dimensions differ across ranks.
        InvalidArgumentError: ``tensor`` is a scalar.
    """
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor: Any, root_rank: int,
                    name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts a broadcast into a new array; see broadcast.

    Args:
        tensor: array of the same shape and dtype on every rank (as
            broadcast).
        root_rank: global rank whose ``tensor`` is sent.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what broadcast returns.

    Raises:
        InvalidArgumentError: as broadcast (``root_rank``), or as
            allreduce_async.
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    set_id = _set_id(process_set)
    array = _as_input(tensor, "broadcast")
    out = _empty_like(array)
    return _submit_one(auto_name("broadcast", name, set_id), _BROADCAST, Sum,
                       array, out, root_rank, 1.0, 1.0, None, False, _GIVEN,
                       out, set_id, _finish(tensor, array))


def broadcast(tensor: Any, root_rank: int,
              name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Returns ``root_rank``'s ``tensor`` on every rank (of
    ``process_set``; ``root_rank`` is a global rank, as in Horovod), as a
    new array (GPU inputs: as allreduce).

    Args:
        tensor: array of the same shape and dtype on every rank (only the
            root's values are used); as for allreduce.
        root_rank: global rank whose ``tensor`` is sent.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        A new array holding the root's values.

    Raises:
        InvalidArgumentError: ``root_rank`` is not in [0, size()) or not a
            member of ``process_set``.
        MismatchError: shape, dtype or root differ across ranks.
    """
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor: np.ndarray, root_rank: int,
                     name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an in-place broadcast; see broadcast_.

    Args:
        tensor: the array overwritten with the root's values (as for
            allreduce_).
        root_rank: global rank whose ``tensor`` is sent.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns ``tensor`` itself.

    Raises:
        InvalidArgumentError: as broadcast_async, or ``tensor`` cannot be
            written in place (see allreduce_).
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    set_id = _set_id(process_set)
    array = _as_inplace(tensor, "broadcast_")
    return _submit_one(auto_name("broadcast", name, set_id), _BROADCAST, Sum,
                       array, array, root_rank, 1.0, 1.0, None, False, _GIVEN,
                       tensor, set_id)


def broadcast_(tensor: np.ndarray, root_rank: int,
               name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Overwrites ``tensor`` with ``root_rank``'s values and returns it.

    Args:
        tensor: C-contiguous, writeable array or DLPack tensor (as for
            allreduce_), of the same shape and dtype on every rank.
        root_rank: global rank whose ``tensor`` is sent.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        ``tensor``, holding the root's values.

    Raises:
        InvalidArgumentError: as broadcast, or ``tensor`` cannot be
            written in place (see allreduce_).
        MismatchError: as broadcast.
    """
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall / reducescatter ----------------------------------------------

def alltoall_async(tensor: Any, splits: Optional[Sequence[int]] = None,
                   name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts an alltoall; see alltoall.

    Args:
        tensor: array with at least one dimension (as alltoall).
        splits: rows sent to each rank, or None to split evenly (as
            alltoall).
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what alltoall returns.

    Raises:
        InvalidArgumentError: as alltoall, or as allreduce_async.
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    set_id = _set_id(process_set)
    array = _as_input(tensor, "alltoall")
    if splits is None:
        rows, kind, finish = None, _OUTPUT, _finish(tensor, array)
    else:
        rows = [int(s) for s in np.asarray(splits).reshape(-1)]
        kind = _OUTPUT_AND_SPLITS
        finish = _finish(tensor, array, pair=True)
    return _submit_one(auto_name("alltoall", name, set_id), _ALLTOALL, Sum,
                       array, None, 0, 1.0, 1.0, rows, _HOST_OUTPUTS, kind, None,
                       set_id, finish)


def alltoall(tensor: Any, splits: Optional[Sequence[int]] = None,
             name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> Any:
    """Sends ``splits[r]`` rows of ``tensor`` to rank r and gathers what
    every rank sent here, in rank order.

    Args:
        tensor: array with at least one dimension.
        splits: rows sent to each rank (sums to ``tensor.shape[0]``); when
            None the first dimension is split evenly. In a process set, one
            entry per member, in rank order.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        The received array (GPU inputs: as allreduce); with ``splits``, a
        tuple of it and the number of rows received from each rank (a
        numpy int64 array).

    Raises:
        InvalidArgumentError: splits have the wrong length or sum, or the
            first dimension does not divide evenly.
    """
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor: Any, name: Optional[str] = None,
                        op: int = Average, prescale_factor: float = 1.0,
                        postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> Handle:
    """Starts a reducescatter; see reducescatter.

    Args:
        tensor: array with at least one dimension (as reducescatter).
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all).

    Returns:
        A Handle; synchronize(handle) returns what reducescatter returns.

    Raises:
        InvalidArgumentError: ``tensor`` is a scalar, Average of a bool
            tensor, or as allreduce_async.
        ValueError, UnsupportedError, NotInitializedError, ShutdownError:
            as allreduce_async.
    """
    set_id = _set_id(process_set)
    array = _as_input(tensor, "reducescatter")
    return _submit_one(auto_name("reducescatter", name, set_id),
                       _REDUCESCATTER, op, array, None, 0, prescale_factor,
                       postscale_factor, None, _HOST_OUTPUTS, _OUTPUT, None,
                       set_id, _finish(tensor, array))


def reducescatter(tensor: Any, name: Optional[str] = None, op: int = Average,
                  prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Reduces ``tensor`` over all ranks and returns this rank's block of
    rows. With n rows and s ranks, rank r gets n // s rows, plus one when
    r < n % s (in a process set: s members, r the set rank). GPU inputs:
    as allreduce.

    Args:
        tensor: array with at least one dimension, of the same shape and
            dtype on every rank (as for allreduce).
        name: name matched across ranks (auto-generated when None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        This rank's block of the reduced rows, as a new array.

    Raises:
        MismatchError: shape, dtype or op differ across ranks.
        InvalidArgumentError: ``tensor`` is a scalar, Average of a bool
            tensor, or as allreduce.
    """
    return synchronize(reducescatter_async(tensor, name, op, prescale_factor,
                                           postscale_factor, process_set))


def grouped_reducescatter(tensors: Sequence[Any], name: Optional[str] = None,
                          op: int = Average, prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0,
        process_set: ProcessSet = global_process_set) -> List[np.ndarray]:
    """Reducescatters a list of tensors announced together.

    Args:
        tensors: the tensors, all in host memory or all on GPUs (each as
            for reducescatter).
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the inputs before the reduction.
        postscale_factor: multiplies the results after the reduction.
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        A list of this rank's blocks (see reducescatter), in input order.

    Raises:
        InvalidArgumentError: as reducescatter, or the group mixes host
            and GPU tensors.
        MismatchError: as reducescatter.
    """
    set_id = _set_id(process_set)
    base = auto_name("grouped_reducescatter", name, set_id)
    arrays = _group_inputs(tensors, "grouped_reducescatter")
    reqs = [_request("%s.%d" % (base, i), _REDUCESCATTER, a,
                     reduce_op=op, prescale=prescale_factor,
                     postscale=postscale_factor, allocate=_HOST_OUTPUTS)
            for i, a in enumerate(arrays)]
    return synchronize(_submit(reqs, _OUTPUTS, None, set_id,
                               _finish_all(tensors, arrays)))


def grouped_allgather(tensors: Sequence[Any],
                      name: Optional[str] = None,
        process_set: ProcessSet = global_process_set) -> List[np.ndarray]:
    """Allgathers a list of tensors announced together.

    Args:
        tensors: the tensors, all in host memory or all on GPUs (each as
            for allgather).
        name: base name; tensor i is ``<name>.<i>`` (auto-generated when
            None).
        process_set: the ranks it runs over (default: all); this rank must
            be a member.

    Returns:
        A list of gathered arrays (see allgather), in input order.

    Raises:
        InvalidArgumentError: as allgather, or the group mixes host and
            GPU tensors.
        MismatchError: as allgather.
    """
    set_id = _set_id(process_set)
    base = auto_name("grouped_allgather", name, set_id)
    arrays = _group_inputs(tensors, "grouped_allgather")
    reqs = [_request("%s.%d" % (base, i), _ALLGATHER, a,
                     allocate=_HOST_OUTPUTS)
            for i, a in enumerate(arrays)]
    return synchronize(_submit(reqs, _OUTPUTS, None, set_id,
                               _finish_all(tensors, arrays)))


# --- synchronisation -------------------------------------------------------

def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Blocks until every rank (of ``process_set``) reached the barrier.

    Args:
        process_set: the ranks that wait for each other (default: all).

    Raises:
        ValueError: ``process_set`` is not registered.
        InvalidArgumentError: this rank is not a member of
            ``process_set``.
        NotInitializedError: before init.
        ShutdownError: the runtime shut down before every rank arrived.
    """
    set_id = _set_id(process_set)
    synchronize(_submit_one(auto_name("barrier", None, set_id), _BARRIER, Sum,
                            None, None, 0, 1.0, 1.0, None, False, _NOTHING,
                            None, set_id))


def join() -> int:
    """Declares that this rank has no more data. Until every rank joined,
    this rank takes part in the others' allreduces with zeros (and in
    allgathers with no rows).

    Returns:
        The rank that joined last.
    """
    return synchronize(_submit_one(_JOIN_NAME, _JOIN, Sum, None, None, 0, 1.0,
                                   1.0, None, False, _LAST_JOINED_RANK))

