"""Test utilities on the fake CUDA runtime (libfakecudart.so).

``FakeCuda`` wraps the runtime with ctypes; ``FakeGpuArray`` is a numpy
array copied to fake device memory that speaks the DLPack protocol as a CUDA
array would (``__dlpack_device__`` is ``(kDLCUDA, device)``);
``from_dlpack_capsule`` copies any kDLCUDA (or kDLCPU) DLPack tensor back
into numpy. Device memory of the fake is host memory, but everything goes
through the runtime's API, as it would on a GPU.

Streams are plain ints here: 0 (or 1, 2) is the legacy default stream, other
values are handles from ``FakeCuda.stream_create``.

    cuda = fake_cuda()
    x = FakeGpuArray(np.arange(4, dtype=np.float32))
    capsule = x.__dlpack__(stream=1)     # what a consumer would do
    y = from_dlpack_capsule(x)           # back to numpy
"""
import ctypes
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .build import build
from .dlpack_abi import (DLDataType, DLDeleter, DLDevice,
                         DLManagedTensor, DLTensor)

KDL_CPU = 1
KDL_CUDA = 2

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
MEMCPY_DEFAULT = 4

CUDA_SUCCESS = 0
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_NOT_READY = 600

LEGACY_STREAMS = (0, 1, 2)  # NULL, cudaStreamLegacy, cudaStreamPerThread


class FakeCudaError(RuntimeError):
    """A fake CUDA runtime call returned an error; ``code`` is the
    cudaError_t."""

    def __init__(self, what: str, code: int, text: str) -> None:
        super().__init__("%s failed: %d (%s)" % (what, code, text))
        self.code = code


_SIGNATURES = {
    "cudaGetDeviceCount": [ctypes.POINTER(ctypes.c_int)],
    "cudaSetDevice": [ctypes.c_int],
    "cudaGetDevice": [ctypes.POINTER(ctypes.c_int)],
    "cudaDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cudaRuntimeGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cudaMalloc": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    "cudaFree": [ctypes.c_void_p],
    "cudaMemcpyAsync": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_int, ctypes.c_void_p],
    "cudaMemcpy": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                   ctypes.c_int],
    "cudaMemsetAsync": [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                        ctypes.c_void_p],
    "cudaStreamCreateWithFlags": [ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_uint],
    "cudaStreamCreate": [ctypes.POINTER(ctypes.c_void_p)],
    "cudaStreamDestroy": [ctypes.c_void_p],
    "cudaStreamSynchronize": [ctypes.c_void_p],
    "cudaStreamQuery": [ctypes.c_void_p],
    "cudaStreamWaitEvent": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint],
    "cudaEventCreateWithFlags": [ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.c_uint],
    "cudaEventDestroy": [ctypes.c_void_p],
    "cudaEventRecord": [ctypes.c_void_p, ctypes.c_void_p],
    "cudaEventQuery": [ctypes.c_void_p],
    "cudaEventSynchronize": [ctypes.c_void_p],
    "cudaDeviceSynchronize": [],
    "fakeCudaStreamSleep": [ctypes.c_void_p, ctypes.c_int],
    "fakeCudaIsDevicePointer": [ctypes.c_void_p, ctypes.c_size_t],
}


class FakeCuda:
    """ctypes wrapper of libfakecudart.so (built on demand).

    ``lib`` is the raw ctypes library, with argument types declared, for
    calls that should check a return code themselves. Host buffers of
    asynchronous host-to-device copies are kept alive until the stream (or
    the device) is synchronized through this object.
    """

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path or build()["cudart"]
        self.lib = ctypes.CDLL(self.path)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self.lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        self.lib.fakeCudaLiveAllocations.argtypes = []
        self.lib.fakeCudaLiveAllocations.restype = ctypes.c_size_t
        self._lock = threading.Lock()
        self._keepalive: Dict[int, List[Any]] = {}

    def error_string(self, code: int) -> str:
        """cudaGetErrorString."""
        return self.lib.cudaGetErrorString(code).decode()

    def check(self, code: int, what: str) -> None:
        """Raises FakeCudaError unless ``code`` is cudaSuccess."""
        if code != CUDA_SUCCESS:
            raise FakeCudaError(what, code, self.error_string(code))

    # ---- devices ----

    def device_count(self) -> int:
        """cudaGetDeviceCount; 0 when it says cudaErrorNoDevice."""
        count = ctypes.c_int(-1)
        rc = self.lib.cudaGetDeviceCount(ctypes.byref(count))
        if rc == CUDA_ERROR_NO_DEVICE:
            return 0
        self.check(rc, "cudaGetDeviceCount")
        return count.value

    def set_device(self, device: int) -> None:
        """cudaSetDevice (per thread)."""
        self.check(self.lib.cudaSetDevice(device), "cudaSetDevice")

    def get_device(self) -> int:
        """cudaGetDevice (per thread)."""
        device = ctypes.c_int(-1)
        self.check(self.lib.cudaGetDevice(ctypes.byref(device)),
                   "cudaGetDevice")
        return device.value

    def pci_bus_id(self, device: int) -> str:
        """cudaDeviceGetPCIBusId."""
        buffer = ctypes.create_string_buffer(32)
        self.check(self.lib.cudaDeviceGetPCIBusId(buffer, len(buffer),
                                                  device),
                   "cudaDeviceGetPCIBusId")
        return buffer.value.decode()

    def runtime_version(self) -> int:
        """cudaRuntimeGetVersion."""
        version = ctypes.c_int(0)
        self.check(self.lib.cudaRuntimeGetVersion(ctypes.byref(version)),
                   "cudaRuntimeGetVersion")
        return version.value

    # ---- memory ----

    def malloc(self, nbytes: int) -> int:
        """cudaMalloc; returns the device pointer (0 for 0 bytes)."""
        ptr = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(ptr), nbytes),
                   "cudaMalloc")
        return ptr.value or 0

    def free(self, ptr: int) -> None:
        """cudaFree (the fake keeps the memory until the work already
        queued on every stream has run, without blocking)."""
        self.check(self.lib.cudaFree(ptr), "cudaFree")

    def live_allocations(self) -> int:
        """The number of allocations not yet freed."""
        return int(self.lib.fakeCudaLiveAllocations())

    def is_device_pointer(self, ptr: int, nbytes: int) -> bool:
        """True when [ptr, ptr + nbytes) lies in one live allocation."""
        return bool(self.lib.fakeCudaIsDevicePointer(ptr, nbytes))

    def memcpy_htod(self, dst: int, src: np.ndarray, stream: int = 0) -> None:
        """Enqueues a copy of ``src`` (made contiguous) to device pointer
        ``dst`` on ``stream``; the host buffer is kept alive until that
        stream or the device is synchronized through this object."""
        host = np.ascontiguousarray(src)
        self.check(self.lib.cudaMemcpyAsync(dst, host.ctypes.data,
                                            host.nbytes,
                                            MEMCPY_HOST_TO_DEVICE, stream),
                   "cudaMemcpyAsync")
        with self._lock:
            self._keepalive.setdefault(self._key(stream), []).append(host)

    def memcpy_dtoh(self, dst: np.ndarray, src: int, stream: int = 0) -> None:
        """Copies device pointer ``src`` into the contiguous array ``dst``
        on ``stream`` and waits for the stream: on return ``dst`` holds the
        data."""
        if not dst.flags.c_contiguous:
            raise ValueError("memcpy_dtoh needs a C-contiguous destination")
        self.check(self.lib.cudaMemcpyAsync(dst.ctypes.data, src, dst.nbytes,
                                            MEMCPY_DEVICE_TO_HOST, stream),
                   "cudaMemcpyAsync")
        self.stream_synchronize(stream)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int,
                    stream: int = 0) -> None:
        """Enqueues a device-to-device copy on ``stream``."""
        self.check(self.lib.cudaMemcpyAsync(dst, src, nbytes,
                                            MEMCPY_DEVICE_TO_DEVICE, stream),
                   "cudaMemcpyAsync")

    def memset(self, ptr: int, value: int, nbytes: int,
               stream: int = 0) -> None:
        """Enqueues cudaMemsetAsync on ``stream``."""
        self.check(self.lib.cudaMemsetAsync(ptr, value, nbytes, stream),
                   "cudaMemsetAsync")

    # ---- streams and events ----

    def stream_create(self, non_blocking: bool = True) -> int:
        """cudaStreamCreateWithFlags; returns the handle."""
        stream = ctypes.c_void_p()
        self.check(self.lib.cudaStreamCreateWithFlags(
            ctypes.byref(stream), 1 if non_blocking else 0),
            "cudaStreamCreateWithFlags")
        return stream.value or 0

    def stream_destroy(self, stream: int) -> None:
        """cudaStreamDestroy (runs the queued work first)."""
        self.check(self.lib.cudaStreamDestroy(stream), "cudaStreamDestroy")
        with self._lock:
            self._keepalive.pop(self._key(stream), None)

    def stream_synchronize(self, stream: int = 0) -> None:
        """cudaStreamSynchronize."""
        self.check(self.lib.cudaStreamSynchronize(stream),
                   "cudaStreamSynchronize")
        with self._lock:
            self._keepalive.pop(self._key(stream), None)

    def stream_query(self, stream: int = 0) -> bool:
        """cudaStreamQuery: True when the stream is idle."""
        rc = self.lib.cudaStreamQuery(stream)
        if rc == CUDA_ERROR_NOT_READY:
            return False
        self.check(rc, "cudaStreamQuery")
        return True

    def device_synchronize(self) -> None:
        """cudaDeviceSynchronize (all streams)."""
        self.check(self.lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
        with self._lock:
            self._keepalive.clear()

    def event_create(self, flags: int = 0x2) -> int:
        """cudaEventCreateWithFlags (default cudaEventDisableTiming)."""
        event = ctypes.c_void_p()
        self.check(self.lib.cudaEventCreateWithFlags(ctypes.byref(event),
                                                     flags),
                   "cudaEventCreateWithFlags")
        return event.value or 0

    def event_destroy(self, event: int) -> None:
        """cudaEventDestroy."""
        self.check(self.lib.cudaEventDestroy(event), "cudaEventDestroy")

    def event_record(self, event: int, stream: int = 0) -> None:
        """cudaEventRecord."""
        self.check(self.lib.cudaEventRecord(event, stream), "cudaEventRecord")

    def event_query(self, event: int) -> bool:
        """cudaEventQuery: True when complete (or never recorded)."""
        rc = self.lib.cudaEventQuery(event)
        if rc == CUDA_ERROR_NOT_READY:
            return False
        self.check(rc, "cudaEventQuery")
        return True

    def event_synchronize(self, event: int) -> None:
        """cudaEventSynchronize."""
        self.check(self.lib.cudaEventSynchronize(event),
                   "cudaEventSynchronize")

    def stream_wait_event(self, stream: int, event: int) -> None:
        """cudaStreamWaitEvent(stream, event, 0): ``stream`` waits for what
        ``event`` captured at this call."""
        self.check(self.lib.cudaStreamWaitEvent(stream, event, 0),
                   "cudaStreamWaitEvent")

    def sleep_on_stream(self, stream: int, ms: int) -> None:
        """Enqueues a sleep of ``ms`` milliseconds on ``stream``
        (fakeCudaStreamSleep)."""
        self.check(self.lib.fakeCudaStreamSleep(stream, ms),
                   "fakeCudaStreamSleep")

    @staticmethod
    def _key(stream: int) -> int:
        return 0 if stream in LEGACY_STREAMS else stream


_shared_cuda: Optional[FakeCuda] = None
_shared_lock = threading.Lock()


def fake_cuda() -> FakeCuda:
    """The process-wide FakeCuda (the same library instance hbcore loads
    when it dlopens the same path)."""
    global _shared_cuda
    with _shared_lock:
        if _shared_cuda is None:
            _shared_cuda = FakeCuda()
        return _shared_cuda


# ---- DLPack (dlpack.h, legacy unversioned DLManagedTensor) ----

_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_COMPLEX, _KDL_BOOL = (
    0, 1, 2, 4, 5, 6)


def _bfloat16() -> Optional[np.dtype]:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def dl_dtype(dtype: np.dtype) -> Tuple[int, int, int]:
    """The DLPack (code, bits, lanes) of a numpy dtype."""
    dtype = np.dtype(dtype)
    bits = dtype.itemsize * 8
    if dtype.name == "bfloat16":
        return (_KDL_BFLOAT, 16, 1)
    if dtype.kind == "b":
        return (_KDL_BOOL, 8, 1)
    codes = {"i": _KDL_INT, "u": _KDL_UINT, "f": _KDL_FLOAT,
             "c": _KDL_COMPLEX}
    if dtype.kind not in codes:
        raise BufferError("no DLPack type for %s" % dtype)
    return (codes[dtype.kind], bits, 1)


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype of a DLPack (code, bits, lanes)."""
    if lanes != 1:
        raise ValueError("DLPack lanes=%d not supported" % lanes)
    if code == _KDL_BFLOAT and bits == 16:
        bf16 = _bfloat16()
        if bf16 is None:
            raise ValueError("bfloat16 needs ml_dtypes")
        return bf16
    kinds = {_KDL_INT: "i", _KDL_UINT: "u", _KDL_FLOAT: "f",
             _KDL_COMPLEX: "c", _KDL_BOOL: "b"}
    if code not in kinds:
        raise ValueError("DLPack type code %d not supported" % code)
    if code == _KDL_BOOL:
        return np.dtype(np.bool_)
    return np.dtype("%s%d" % (kinds[code], bits // 8))


# A private handle on the C API: ctypes.pythonapi's function objects, and
# so their argtypes, are shared by every module of the process.
_capi = ctypes.PyDLL(ctypes.pythonapi._name)
_PyCapsule_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                _PyCapsule_Destructor]
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capi.PyCapsule_SetName.restype = ctypes.c_int
_capi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]

# A capsule keeps a pointer to its name: these buffers live forever.
_DLTENSOR_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_DLTENSOR_NAME = ctypes.create_string_buffer(b"used_dltensor")

# manager_ctx -> what a live export keeps alive (the array, the struct, its
# shape); the deleter drops it.
_exports: Dict[int, Tuple["FakeGpuArray", DLManagedTensor, Any]] = {}
_exports_lock = threading.Lock()
_next_export = [1]


@DLDeleter
def _dl_deleter(managed: "ctypes._Pointer") -> None:
    key = managed.contents.manager_ctx
    with _exports_lock:
        entry = _exports.pop(key, None)
    if entry is not None:
        entry[0]._exports_released += 1


@_PyCapsule_Destructor
def _capsule_destructor(capsule: int) -> None:
    # A consumer renames the capsule "used_dltensor" and owns the tensor;
    # only a capsule nobody consumed still owns it.
    if not _capi.PyCapsule_IsValid(capsule, b"dltensor"):
        return
    ptr = _capi.PyCapsule_GetPointer(capsule, b"dltensor")
    managed = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor))
    if managed.contents.deleter:
        managed.contents.deleter(managed)


class FakeGpuArray:
    """A copy of a numpy array in fake device memory, exported through the
    DLPack protocol as a CUDA array on ``device``.

    Work on the array's data is ordered on ``stream`` (0: the legacy
    stream); ``__dlpack__(stream=s)`` orders that work before consumer
    stream ``s`` with an event, per the Python array API standard.
    """

    def __init__(self, array: Any, device: int = 0,
                 stream: Optional[int] = None,
                 cuda: Optional[FakeCuda] = None) -> None:
        host = np.array(array, copy=True, order="C")
        self._init(host.shape, host.dtype, device, stream, cuda)
        if self.nbytes:
            # Keeps `host` alive until synchronized (see memcpy_htod).
            self.cuda.memcpy_htod(self.ptr, host, self.stream)

    @classmethod
    def empty(cls, shape: Sequence[int], dtype: Any, device: int = 0,
              stream: Optional[int] = None,
              cuda: Optional[FakeCuda] = None) -> "FakeGpuArray":
        """An uninitialized array (the fake fills new memory with 0xff)."""
        self = cls.__new__(cls)
        self._init(tuple(shape), np.dtype(dtype), device, stream, cuda)
        return self

    def _init(self, shape: Tuple[int, ...], dtype: np.dtype, device: int,
              stream: Optional[int], cuda: Optional[FakeCuda]) -> None:
        self.cuda = cuda or fake_cuda()
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.stream = 0 if stream is None else int(stream)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * \
            self.dtype.itemsize
        self._exports_released = 0
        self._exported = 0
        self.ptr = self.cuda.malloc(self.nbytes)

    @property
    def exports_released(self) -> int:
        """How many DLPack exports of this array had their deleter called."""
        return self._exports_released

    @property
    def live_exports(self) -> int:
        """DLPack exports whose deleter has not run yet."""
        return self._exported - self._exports_released

    def numpy(self) -> np.ndarray:
        """A host copy, after the array's pending work on its stream."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self.cuda.memcpy_dtoh(out, self.ptr, self.stream)
        return out

    def copy(self) -> "FakeGpuArray":
        """A device copy, ordered on this array's stream."""
        other = FakeGpuArray.empty(self.shape, self.dtype, self.device,
                                   self.stream, self.cuda)
        if self.nbytes:
            self.cuda.memcpy_dtod(other.ptr, self.ptr, self.nbytes,
                                  self.stream)
        return other

    def free(self) -> None:
        """Frees the device memory now (no DLPack export may be alive)."""
        if self.live_exports:
            raise RuntimeError("FakeGpuArray freed with %d live DLPack "
                               "exports" % self.live_exports)
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self.cuda.free(ptr)

    def __del__(self) -> None:
        # Live exports hold a reference, so this runs after their deleters.
        try:
            if getattr(self, "ptr", 0):
                self.cuda.free(self.ptr)
                self.ptr = 0
        except Exception:  # interpreter shutdown
            pass

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (KDL_CUDA, self.device)

    def __dlpack__(self, stream: Optional[int] = None,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        """Exports the array as a legacy "dltensor" capsule.

        stream: the consumer's stream: None or 1 (legacy default), 2 (per
        thread default; the same stream in the fake), a stream handle, or
        -1 (no synchronization). The producer's pending work is ordered
        before it. max_version is accepted and ignored (this producer only
        makes unversioned capsules, which the standard allows).
        """
        del max_version
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA,
                                                          self.device):
            raise BufferError("FakeGpuArray lives on %s, not %s"
                              % ((KDL_CUDA, self.device), tuple(dl_device)))
        if copy:
            return self.copy().__dlpack__(stream=stream)
        if stream == 0:
            raise ValueError("stream=0 is ambiguous for CUDA (use 1 or 2)")
        consumer = 1 if stream is None else int(stream)
        if consumer != -1 and (FakeCuda._key(consumer)
                               != FakeCuda._key(self.stream)):
            event = self.cuda.event_create()
            try:
                self.cuda.event_record(event, self.stream)
                self.cuda.stream_wait_event(consumer, event)
            finally:
                self.cuda.event_destroy(event)
        return self._export()

    def _export(self) -> Any:
        code, bits, lanes = dl_dtype(self.dtype)
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        managed = DLManagedTensor()
        tensor = managed.dl_tensor
        tensor.data = self.ptr or None
        tensor.device = DLDevice(KDL_CUDA, self.device)
        tensor.ndim = len(self.shape)
        tensor.dtype = DLDataType(code, bits, lanes)
        tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        tensor.strides = None  # compact row-major
        tensor.byte_offset = 0
        with _exports_lock:
            key = _next_export[0]
            _next_export[0] += 1
            _exports[key] = (self, managed, shape)
        managed.manager_ctx = key
        managed.deleter = _dl_deleter
        self._exported += 1
        return _capi.PyCapsule_New(ctypes.addressof(managed),
                                   ctypes.addressof(_DLTENSOR_NAME),
                                   _capsule_destructor)


def live_dlpack_exports() -> int:
    """DLPack exports of FakeGpuArrays (all of them) not yet deleted."""
    with _exports_lock:
        return len(_exports)


def from_dlpack_capsule(obj: Any, cuda: Optional[FakeCuda] = None,
                        ) -> np.ndarray:
    """Copies a DLPack tensor on kDLCUDA (fake device memory) or kDLCPU into
    a new numpy array, consuming the capsule like a DLPack consumer (renamed
    "used_dltensor", deleter called once).

    obj: an object with ``__dlpack__`` (asked for the legacy stream, which
    is then synchronized) or a "dltensor" capsule (the whole device is
    synchronized first, as its producer's stream is unknown).
    """
    cuda = cuda or fake_cuda()
    if hasattr(obj, "__dlpack__"):
        device_type, _ = obj.__dlpack_device__()
        capsule = obj.__dlpack__(stream=1 if device_type == KDL_CUDA
                                 else None)
        wait = lambda: cuda.stream_synchronize(1)  # noqa: E731
    else:
        capsule = obj
        wait = cuda.device_synchronize
    if not _capi.PyCapsule_IsValid(ctypes.c_void_p(id(capsule)),
                                   b"dltensor"):
        raise ValueError("not an unconsumed 'dltensor' capsule")
    ptr = _capi.PyCapsule_GetPointer(ctypes.c_void_p(id(capsule)),
                                     b"dltensor")
    managed = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor))
    tensor = managed.contents.dl_tensor
    if tensor.device.device_type not in (KDL_CPU, KDL_CUDA):
        raise ValueError("DLPack device type %d not supported"
                         % tensor.device.device_type)
    # Consume first: from here on, the deleter is ours to call.
    _capi.PyCapsule_SetName(capsule, ctypes.addressof(_USED_DLTENSOR_NAME))
    try:
        if tensor.device.device_type == KDL_CUDA:
            wait()
        return _copy_tensor(tensor, cuda)
    finally:
        if managed.contents.deleter:
            managed.contents.deleter(managed)


def _copy_tensor(tensor: DLTensor, cuda: FakeCuda) -> np.ndarray:
    dtype = numpy_dtype(tensor.dtype.code, tensor.dtype.bits,
                        tensor.dtype.lanes)
    ndim = tensor.ndim
    shape = tuple(tensor.shape[i] for i in range(ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[i] for i in range(ndim))
    else:  # compact row-major
        strides, step = [], 1
        for dim in reversed(shape):
            strides.insert(0, step)
            step *= max(dim, 1)
        strides = tuple(strides)
    if any(d == 0 for d in shape):
        return np.empty(shape, dtype)
    if any(s < 0 for s in strides):
        raise ValueError("negative DLPack strides not supported")
    span = (sum((d - 1) * s for d, s in zip(shape, strides)) + 1) \
        * dtype.itemsize
    address = (tensor.data or 0) + tensor.byte_offset
    if (tensor.device.device_type == KDL_CUDA
            and not cuda.is_device_pointer(address, span)):
        raise ValueError("DLPack data 0x%x (+%d bytes) is not fake device "
                         "memory" % (address, span))
    raw = (ctypes.c_char * span).from_address(address)
    flat = np.frombuffer(raw, dtype=dtype, count=span // dtype.itemsize)
    view = np.lib.stride_tricks.as_strided(
        flat, shape=shape,
        strides=tuple(s * dtype.itemsize for s in strides))
    return np.array(view, copy=True)
