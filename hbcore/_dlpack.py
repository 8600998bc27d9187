"""Tensors of other frameworks in the numpy API, through DLPack.

Every collective of hbcore.ops takes, besides numpy arrays and what
``numpy.asarray`` accepts, any object with ``__dlpack__`` and
``__dlpack_device__`` (PyTorch, CuPy, JAX, TensorFlow EagerTensors, ...).
Its DLPack device decides the path:

- kDLCPU (1) and kDLCUDAHost (3): the host path, as numpy arrays. An
  object numpy reads itself (``__array__``, ``__array_interface__``)
  goes through ``numpy.asarray`` as before; any other through
  ``numpy.from_dlpack``. Results are numpy arrays. In-place operations
  write into such a tensor's memory; numpy before 2.2.5 imports every
  DLPack tensor read-only whatever the producer allows, and there hbcore
  writes through a writeable view of the same memory.
- kDLCUDA (2) and kDLCUDAManaged (13): the GPU path. hbcore calls
  ``obj.__dlpack__(stream=1, max_version=(1, 0))``, or without
  ``max_version`` and then without arguments for producers that refuse
  those keywords. Stream 1 is CUDA's legacy default stream: the producer
  orders its pending writes before it, and the core orders its reads
  after the work queued there. (A producer that takes no ``stream`` must
  have finished writing; TensorFlow, which refuses a stream, is
  synchronized with ``tf.test.experimental.sync_devices()`` first.) A DLPack 1.x ("dltensor_versioned") or
  legacy ("dltensor") capsule is accepted; hbcore marks it used and keeps
  the tensor alive until the operation finished. The tensor must be
  C-contiguous, of a dtype hbcore reduces (int8..int64, uint8, uint16,
  float16/32/64, bfloat16, bool; one lane), else InvalidArgumentError.
  Outputs are device memory on the input's device (allocated by the
  runtime), returned converted into the input's framework by the
  ``from_dlpack`` of its top-level module (``torch.from_dlpack``,
  ``cupy.from_dlpack``, ``jax.numpy.from_dlpack``,
  ``tf.experimental.dlpack.from_dlpack`` for TensorFlow) when it accepts
  them, otherwise as :class:`GpuArray`. In-place operations
  (``allreduce_``, ``broadcast_``) write into the tensor itself and
  return it; they refuse tensors a DLPack 1.x producer flags read-only
  or copied (a legacy capsule carries no such flag).
- any other device: UnsupportedError.
"""
import sys
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy as np

from hbcore._native import core
from hbcore.exceptions import InvalidArgumentError, UnsupportedError

# DLPack device types (DLDeviceType in dlpack.h).
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_HOST = (KDL_CPU, KDL_CUDA_HOST)
_GPU = (KDL_CUDA, KDL_CUDA_MANAGED)

# The legacy default stream, in the array API's __dlpack__(stream=...).
_LEGACY_DEFAULT_STREAM = 1

#: Device memory holding a GPU collective's result (see the module doc).
GpuArray = core.GpuArray

# An input as core.submit takes it.
Input = Union[np.ndarray, "core.DlpackInput"]


def dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    """``obj.__dlpack_device__()`` as ints, or None when it has none."""
    method = getattr(type(obj), "__dlpack_device__", None)
    if method is None:
        return None
    device_type, device_id = method(obj)
    return int(device_type), int(device_id)


def as_input(obj: Any, what: str) -> Input:
    """What core.submit reads for one input that is not a numpy array.

    Args:
        obj: the caller's tensor.
        what: the operation, for messages.

    Returns:
        A C-contiguous numpy array (host path) or a DlpackInput (GPU path).

    Raises:
        InvalidArgumentError: a GPU tensor hbcore cannot read (layout,
            dtype), or a host DLPack tensor numpy cannot read.
        UnsupportedError: memory of another device type.
    """
    device = dlpack_device(obj)
    if device is None:
        return np.asarray(obj, order="C")
    if device[0] in _GPU:
        return _take(obj, False, what)
    if device[0] in _HOST:
        return np.asarray(_host_array(obj, what), order="C")
    raise _unsupported_device(device, what)


def as_inplace(obj: Any, what: str) -> Optional[Input]:
    """The buffer an in-place operation writes, for a non-numpy ``obj``.

    Returns:
        A DlpackInput (GPU), a numpy view of host memory (the caller checks
        it is C-contiguous and writeable), or None when ``obj`` is no
        DLPack producer.

    Raises:
        InvalidArgumentError: as :func:`as_input`, or the producer
            exported a read-only tensor or a copy.
        UnsupportedError: memory of another device type.
    """
    device = dlpack_device(obj)
    if device is None:
        return None
    if device[0] in _GPU:
        return _take(obj, True, what)
    if device[0] in _HOST:
        return _host_array(obj, what, writeable=True)
    raise _unsupported_device(device, what)


def is_device(array: Input) -> bool:
    """True for what :func:`as_input` returns on the GPU path."""
    return isinstance(array, core.DlpackInput)


def empty_like(array: "core.DlpackInput") -> GpuArray:
    """Uninitialised device memory of ``array``'s shape, dtype and device.

    Raises:
        UnsupportedError: the runtime has no GPU support (the message says
            which library is missing).
        NotInitializedError: before init.
    """
    return core.gpu_empty(array.device, array.shape, array.dtype)


def converter(obj: Any) -> Callable[[Any], Any]:
    """A function turning a GpuArray result into ``obj``'s framework (see
    the module doc); it returns anything else, or a GpuArray the framework
    refuses, unchanged. The framework is looked up at conversion time."""
    cls = type(obj)

    def convert(result: Any) -> Any:
        if not isinstance(result, GpuArray):
            return result
        try:
            if cls not in _converters:
                _converters[cls] = _framework_from_dlpack(cls)
            to_framework = _converters[cls]
            return result if to_framework is None else to_framework(result)
        except Exception:  # the framework refuses it: the GpuArray it is
            return result

    return convert


def convert_all(objs: Any) -> Callable[[Any], Any]:
    """:func:`converter` for a list result, element by element."""
    converters = [converter(o) for o in objs]

    def convert(results: Any) -> Any:
        return [c(r) for c, r in zip(converters, results)]

    return convert


# Per input type: its framework's from_dlpack, or None (keep the GpuArray).
_converters: Dict[type, Optional[Callable[[Any], Any]]] = {}


def _framework_from_dlpack(cls: type) -> Optional[Callable[[Any], Any]]:
    top = (cls.__module__ or "").partition(".")[0]
    module = sys.modules.get(top)
    if top == "tensorflow" and module is not None:
        from_capsule = module.experimental.dlpack.from_dlpack
        return lambda array: from_capsule(array.__dlpack__())
    if top in ("jax", "jaxlib"):
        jnp = sys.modules.get("jax.numpy")
        return None if jnp is None else jnp.from_dlpack
    from_dlpack = getattr(module, "from_dlpack", None)
    if top in ("hbcore", "numpy") or not callable(from_dlpack):
        return None
    return from_dlpack


def _take(obj: Any, writable: bool, what: str) -> "core.DlpackInput":
    if _is_tensorflow(obj):
        capsule = _tensorflow_capsule(obj)
    else:
        try:
            capsule = obj.__dlpack__(stream=_LEGACY_DEFAULT_STREAM,
                                     max_version=(1, 0))
        except TypeError:  # no max_version (producers before DLPack 1.0)
            try:
                capsule = obj.__dlpack__(stream=_LEGACY_DEFAULT_STREAM)
            except TypeError:  # no stream keyword either
                capsule = obj.__dlpack__()
    return core.dlpack_input(capsule, writable, what)


def _is_tensorflow(obj: Any) -> bool:
    return (type(obj).__module__ or "").startswith("tensorflow.")


def _tensorflow_capsule(tensor: Any) -> Any:
    """TensorFlow exports without a stream (it refuses one) and runs GPU
    ops asynchronously on streams of its own, which the legacy default
    stream does not wait for: its devices are synchronized first, so the
    tensor is written when hbcore reads it. (hbcore_tf's GPU kernels order
    themselves on TensorFlow's stream instead, without this wait.)"""
    tf = sys.modules["tensorflow"]
    tf.test.experimental.sync_devices()
    return tensor.__dlpack__()


# numpy before 2.2.5 marks every array from numpy.from_dlpack read-only
# (numpy 1.x asks for legacy capsules, which carry no read-only flag; 2.x
# before 2.2.5 ignored the flag of DLPack 1.x capsules), so there it says
# nothing of the producer's memory. Later versions keep the producer's flag.
_READONLY_IMPORTS = np.lib.NumpyVersion(np.__version__) < "2.2.5"


def _writeable_alias(array: np.ndarray) -> np.ndarray:
    """A writeable array over the memory of read-only, C-contiguous
    ``array`` (from numpy.from_dlpack), which it keeps alive."""
    import ctypes
    buffer = (ctypes.c_char * array.nbytes).from_address(array.ctypes.data)
    buffer.imported = array  # the capsule's tensor lives as long as the alias
    return np.frombuffer(buffer, dtype=array.dtype).reshape(array.shape)


def _host_array(obj: Any, what: str, writeable: bool = False) -> np.ndarray:
    """``obj``'s host memory as a numpy array; ``writeable``: for an
    in-place operation (the caller still checks the array can be written)."""
    if hasattr(obj, "__array__") or hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    try:
        array = np.from_dlpack(obj)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise InvalidArgumentError("%s: cannot read %s through DLPack: %s"
                                   % (what, type(obj).__name__, exc)) from exc
    if (writeable and _READONLY_IMPORTS and not array.flags.writeable
            and array.flags.c_contiguous):
        return _writeable_alias(array)
    return array


def _unsupported_device(device: Tuple[int, int], what: str
                        ) -> UnsupportedError:
    return UnsupportedError(
        "%s: tensors on DLPack device type %d (device %d) are not "
        "supported; hbcore takes host memory and CUDA memory (device types "
        "1, 2, 3, 13)" % (what, device[0], device[1]))
