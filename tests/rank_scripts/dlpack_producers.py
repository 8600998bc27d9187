"""DLPack producers for tests of hbcore's DLPack front end, built with
ctypes so that no framework is needed.

- HostDlpack: wraps a numpy array and offers only ``__dlpack__`` and
  ``__dlpack_device__`` (no ``__array__``), like a CPU tensor of a
  framework numpy does not know.
- FakeDeviceTensor: claims CUDA memory (device type 2 by default) with a
  shape, strides and DLPack dtype of the test's choosing, as a legacy or a
  versioned (DLPack 1.0) capsule. Its data pointer is host memory that
  nothing may read; hbcore must reject or validate it before any access.
  It counts its deleter calls, so tests can check that hbcore releases
  every tensor it consumed exactly once (and no tensor it did not).
"""
import ctypes
import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np


# The DLPack structures, shared with the fake GPU's arrays.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from fake_gpu.dlpack_abi import (DLDataType, DLDevice,  # noqa: E402
                                 DLManagedTensor, DLManagedTensorVersioned,
                                 DLPackVersion)
from fake_gpu.dlpack_abi import DLDeleter as _LEGACY_DELETER  # noqa: E402
from fake_gpu.dlpack_abi import (  # noqa: E402
    DLVersionedDeleter as _VERSIONED_DELETER)

FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2

# A private handle on the C API: ctypes.pythonapi's function objects, and
# so their argtypes, are shared by every module of the process.
_api = ctypes.PyDLL(ctypes.pythonapi._name)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                               ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

# Every managed tensor made, by manager_ctx: [tensor, deleter calls].
_made = {}
_next_ctx = [1]


@_LEGACY_DELETER
def _legacy_deleter(managed):
    _made[managed.contents.manager_ctx][1] += 1


@_VERSIONED_DELETER
def _versioned_deleter(managed):
    _made[managed.contents.manager_ctx][1] += 1


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # The protocol: an unconsumed capsule frees its tensor.
    for name, kind in ((b"dltensor", DLManagedTensor),
                       (b"dltensor_versioned", DLManagedTensorVersioned)):
        if _api.PyCapsule_IsValid(capsule, name):
            ptr = _api.PyCapsule_GetPointer(capsule, name)
            managed = ctypes.cast(ptr, ctypes.POINTER(kind))
            managed.contents.deleter(managed)


def capsule_name(capsule: Any) -> str:
    return _api.PyCapsule_GetName(capsule).decode()


class FakeDeviceTensor:
    """See the module doc.

    Args:
        shape: dimensions.
        dtype: DLPack (code, bits, lanes); default float32.
        strides: in elements, or None (compact).
        device: (device type, device id).
        versioned: answer ``__dlpack__(max_version=(1, 0))`` with a
            DLPack 1.0 capsule.
        flags: the versioned capsule's flags.
    """

    def __init__(self, shape: Sequence[int],
                 dtype: Tuple[int, int, int] = (2, 32, 1),
                 strides: Optional[Sequence[int]] = None,
                 device: Tuple[int, int] = (2, 0), versioned: bool = False,
                 flags: int = 0) -> None:
        self.shape = list(shape)
        self.dtype = dtype
        self.strides = None if strides is None else list(strides)
        self.device = device
        self.versioned = versioned
        self.flags = flags
        self.calls: List[dict] = []
        self.ctxs: List[int] = []
        self._host = np.zeros(max(1, int(np.prod(self.shape) or 1)) * 8,
                              np.uint8)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None, max_version: Any = None,
                   dl_device: Any = None, copy: Any = None) -> Any:
        self.calls.append({"stream": stream, "max_version": max_version})
        versioned = (self.versioned and max_version is not None
                     and tuple(max_version) >= (1, 0))
        return self._capsule(versioned)

    @property
    def deleter_calls(self) -> List[int]:
        """How often each exported tensor's deleter ran."""
        return [_made[c][1] for c in self.ctxs]

    def _capsule(self, versioned: bool) -> Any:
        ctx = _next_ctx[0]
        _next_ctx[0] += 1
        kind = DLManagedTensorVersioned if versioned else DLManagedTensor
        managed = kind()
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(1, ndim))(*self.shape)
        strides = None
        if self.strides is not None:
            strides = (ctypes.c_int64 * max(1, ndim))(*self.strides)
        t = managed.dl_tensor
        t.data = self._host.ctypes.data
        t.device = DLDevice(*self.device)
        t.ndim = ndim
        t.dtype = DLDataType(*self.dtype)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        managed.manager_ctx = ctx
        if versioned:
            managed.version = DLPackVersion(1, 0)
            managed.flags = self.flags
            managed.deleter = _versioned_deleter
        else:
            managed.deleter = _legacy_deleter
        # Kept for the life of the process: the structs must outlive
        # every use by the consumer.
        _made[ctx] = [(managed, shape, strides, self), 0]
        self.ctxs.append(ctx)
        name = b"dltensor_versioned" if versioned else b"dltensor"
        return _api.PyCapsule_New(ctypes.addressof(managed), name,
                                  ctypes.cast(_capsule_destructor,
                                              ctypes.c_void_p))


class NoMaxVersionTensor(FakeDeviceTensor):
    """A producer from before DLPack 1.0: no max_version keyword."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore
        self.calls.append({"stream": stream})
        return self._capsule(False)


class NoKeywordsTensor(FakeDeviceTensor):
    """A producer that takes no keywords at all."""

    def __dlpack__(self) -> Any:  # type: ignore
        self.calls.append({})
        return self._capsule(False)


class HostDlpack:
    """A host tensor readable only through DLPack (no __array__)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)
