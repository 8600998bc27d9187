"""ctypes wrapper of the fake NCCL (libfakenccl.so), for tests that drive
it directly. Calls return the raw ncclResult_t (tests check error codes);
``check`` turns one into an exception. Pointers and streams are ints.

    nccl = FakeNccl()
    uid = nccl.get_unique_id()            # 128 bytes, to pass to the ranks
    comm = nccl.comm_init_rank(nranks, uid, rank)
    rc = nccl.all_reduce(send, recv, count, NCCL_FLOAT32, NCCL_SUM, comm, s)
"""
import ctypes
import os
import struct
from typing import Any, Optional, Tuple

import numpy as np

from .build import build

NCCL_SUCCESS = 0
NCCL_UNHANDLED_CUDA_ERROR = 1
NCCL_SYSTEM_ERROR = 2
NCCL_INTERNAL_ERROR = 3
NCCL_INVALID_ARGUMENT = 4
NCCL_INVALID_USAGE = 5
NCCL_REMOTE_ERROR = 6
NCCL_IN_PROGRESS = 7

NCCL_INT8, NCCL_UINT8, NCCL_INT32, NCCL_UINT32 = 0, 1, 2, 3
NCCL_INT64, NCCL_UINT64, NCCL_FLOAT16, NCCL_FLOAT32 = 4, 5, 6, 7
NCCL_FLOAT64, NCCL_BFLOAT16 = 8, 9

NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4

NCCL_SCALAR_DEVICE = 0
NCCL_SCALAR_HOST_IMMEDIATE = 1

_NCCL_DTYPES = {"int8": NCCL_INT8, "uint8": NCCL_UINT8, "int32": NCCL_INT32,
                "uint32": NCCL_UINT32, "int64": NCCL_INT64,
                "uint64": NCCL_UINT64, "float16": NCCL_FLOAT16,
                "float32": NCCL_FLOAT32, "float64": NCCL_FLOAT64,
                "bfloat16": NCCL_BFLOAT16}


def nccl_dtype(dtype: Any) -> int:
    """The ncclDataType_t of a numpy dtype (bfloat16: ml_dtypes')."""
    return _NCCL_DTYPES[np.dtype(dtype).name]


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class NcclError(RuntimeError):
    """A fake NCCL call failed; ``code`` is the ncclResult_t."""

    def __init__(self, what: str, code: int, text: str) -> None:
        super().__init__("%s failed: %d (%s)" % (what, code, text))
        self.code = code


def shm_prefix(uid: bytes) -> str:
    """The name prefix of every file the communicators of unique id ``uid``
    create in the fake's shm directory (see fake_nccl.cc)."""
    random, pid = struct.unpack_from("<Qi", uid, 8)
    return "fakenccl-%d-%016x-" % (pid, random)


def shm_files(uid: bytes, directory: Optional[str] = None) -> list:
    """The files of ``uid``'s communicators that exist now."""
    directory = directory or os.environ.get("FAKE_NCCL_SHM_DIR", "/dev/shm")
    prefix = shm_prefix(uid)
    return sorted(name for name in os.listdir(directory)
                  if name.startswith(prefix))


_P, _I, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_SIGNATURES = {
    "ncclGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "ncclGetUniqueId": [ctypes.POINTER(NcclUniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(ctypes.c_void_p), _I, NcclUniqueId,
                         _I],
    "ncclCommDestroy": [_P],
    "ncclCommAbort": [_P],
    "ncclCommGetAsyncError": [_P, ctypes.POINTER(ctypes.c_int)],
    "ncclRedOpCreatePreMulSum": [ctypes.POINTER(ctypes.c_int), _P, _I, _I,
                                 _P],
    "ncclRedOpDestroy": [_I, _P],
    "ncclAllReduce": [_P, _P, _S, _I, _I, _P, _P],
    "ncclBroadcast": [_P, _P, _S, _I, _I, _P, _P],
    "ncclReduce": [_P, _P, _S, _I, _I, _I, _P, _P],
    "ncclAllGather": [_P, _P, _S, _I, _P, _P],
    "ncclReduceScatter": [_P, _P, _S, _I, _I, _P, _P],
    "ncclSend": [_P, _S, _I, _I, _P, _P],
    "ncclRecv": [_P, _S, _I, _I, _P, _P],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}


class FakeNccl:
    """ctypes wrapper of libfakenccl.so (built on demand)."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path or build()["nccl"]
        self.lib = ctypes.CDLL(self.path)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self.lib.ncclGetErrorString.argtypes = [ctypes.c_int]
        self.lib.ncclGetErrorString.restype = ctypes.c_char_p

    def error_string(self, code: int) -> str:
        """ncclGetErrorString."""
        return self.lib.ncclGetErrorString(code).decode()

    def check(self, code: int, what: str) -> None:
        """Raises NcclError unless ``code`` is ncclSuccess."""
        if code != NCCL_SUCCESS:
            raise NcclError(what, code, self.error_string(code))

    def version(self) -> int:
        """ncclGetVersion."""
        version = ctypes.c_int(0)
        self.check(self.lib.ncclGetVersion(ctypes.byref(version)),
                   "ncclGetVersion")
        return version.value

    def get_unique_id(self) -> bytes:
        """ncclGetUniqueId: the 128 bytes to hand to every rank."""
        uid = NcclUniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)),
                   "ncclGetUniqueId")
        return bytes(ctypes.string_at(ctypes.addressof(uid), 128))

    def init_rank(self, nranks: int, uid: bytes, rank: int) -> Tuple[int, int]:
        """ncclCommInitRank (the id passed by value): (result, comm)."""
        unique = NcclUniqueId()
        ctypes.memmove(ctypes.addressof(unique), uid, 128)
        comm = ctypes.c_void_p()
        rc = self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, unique,
                                       rank)
        return rc, comm.value or 0

    def comm_init_rank(self, nranks: int, uid: bytes, rank: int) -> int:
        """ncclCommInitRank that raises on failure; returns the comm."""
        rc, comm = self.init_rank(nranks, uid, rank)
        self.check(rc, "ncclCommInitRank")
        return comm

    def comm_destroy(self, comm: int) -> int:
        """ncclCommDestroy."""
        return self.lib.ncclCommDestroy(comm)

    def comm_abort(self, comm: int) -> int:
        """ncclCommAbort."""
        return self.lib.ncclCommAbort(comm)

    def async_error(self, comm: int) -> Tuple[int, int]:
        """ncclCommGetAsyncError: (result of the call, async error)."""
        err = ctypes.c_int(-1)
        rc = self.lib.ncclCommGetAsyncError(comm, ctypes.byref(err))
        return rc, err.value

    def premulsum(self, scalar: Any, dtype: int, residence: int,
                  comm: int) -> Tuple[int, int]:
        """ncclRedOpCreatePreMulSum: (result, op). ``scalar`` is a numpy
        scalar/array of the op's dtype for host residence, or a device
        pointer (int) for device residence."""
        op = ctypes.c_int(-1)
        if residence == NCCL_SCALAR_HOST_IMMEDIATE:
            value = np.array(scalar).reshape(1)
            rc = self.lib.ncclRedOpCreatePreMulSum(
                ctypes.byref(op), value.ctypes.data, dtype, residence, comm)
        else:
            rc = self.lib.ncclRedOpCreatePreMulSum(
                ctypes.byref(op), scalar, dtype, residence, comm)
        return rc, op.value

    def redop_destroy(self, op: int, comm: int) -> int:
        """ncclRedOpDestroy."""
        return self.lib.ncclRedOpDestroy(op, comm)

    def all_reduce(self, send: int, recv: int, count: int, dtype: int,
                   op: int, comm: int, stream: int = 0) -> int:
        """ncclAllReduce."""
        return self.lib.ncclAllReduce(send, recv, count, dtype, op, comm,
                                      stream)

    def broadcast(self, send: int, recv: int, count: int, dtype: int,
                  root: int, comm: int, stream: int = 0) -> int:
        """ncclBroadcast."""
        return self.lib.ncclBroadcast(send, recv, count, dtype, root, comm,
                                      stream)

    def reduce(self, send: int, recv: int, count: int, dtype: int, op: int,
               root: int, comm: int, stream: int = 0) -> int:
        """ncclReduce."""
        return self.lib.ncclReduce(send, recv, count, dtype, op, root, comm,
                                   stream)

    def all_gather(self, send: int, recv: int, send_count: int, dtype: int,
                   comm: int, stream: int = 0) -> int:
        """ncclAllGather."""
        return self.lib.ncclAllGather(send, recv, send_count, dtype, comm,
                                      stream)

    def reduce_scatter(self, send: int, recv: int, recv_count: int,
                       dtype: int, op: int, comm: int,
                       stream: int = 0) -> int:
        """ncclReduceScatter."""
        return self.lib.ncclReduceScatter(send, recv, recv_count, dtype, op,
                                          comm, stream)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int,
             stream: int = 0) -> int:
        """ncclSend."""
        return self.lib.ncclSend(buf, count, dtype, peer, comm, stream)

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int,
             stream: int = 0) -> int:
        """ncclRecv."""
        return self.lib.ncclRecv(buf, count, dtype, peer, comm, stream)

    def group_start(self) -> int:
        """ncclGroupStart."""
        return self.lib.ncclGroupStart()

    def group_end(self) -> int:
        """ncclGroupEnd."""
        return self.lib.ncclGroupEnd()
