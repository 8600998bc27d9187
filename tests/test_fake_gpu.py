"""Tests of the fake CUDA runtime and NCCL in tests/fake_gpu, which hbcore's
NCCL path is tested against in CI: the fake itself must be right.

Single-process tests drive the libraries through ctypes (several ranks of a
communicator may be threads of this process); the multi-process ones start
the ranks of tests/fake_gpu/selftest_rank.py as subprocesses, each with a
deadline, and check that no shared-memory file is left behind.
"""
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

from fake_gpu.build import build
from fake_gpu.fake_array import (FakeCuda, FakeCudaError, FakeGpuArray,
                                 fake_cuda, from_dlpack_capsule,
                                 live_dlpack_exports)
from fake_gpu.nccl_ctypes import (NCCL_BFLOAT16, NCCL_FLOAT16, NCCL_FLOAT32,
                                  NCCL_INT32, NCCL_INVALID_ARGUMENT,
                                  NCCL_INVALID_USAGE, NCCL_REMOTE_ERROR,
                                  NCCL_SCALAR_DEVICE,
                                  NCCL_SCALAR_HOST_IMMEDIATE, NCCL_SUCCESS,
                                  NCCL_SUM, NCCL_SYSTEM_ERROR, FakeNccl,
                                  shm_files, shm_prefix)
from support.waiting import poll_until

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SHM_DIR = os.environ.get("FAKE_NCCL_SHM_DIR", "/dev/shm")

CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_HANDLE = 400

ABI_NAMES = [
    "cudaGetDeviceCount", "cudaSetDevice", "cudaGetDevice",
    "cudaDeviceGetPCIBusId",
    "cudaRuntimeGetVersion", "cudaMalloc", "cudaFree", "cudaMemcpyAsync",
    "cudaMemsetAsync", "cudaStreamCreateWithFlags", "cudaStreamDestroy",
    "cudaStreamSynchronize", "cudaStreamQuery", "cudaStreamWaitEvent",
    "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventRecord",
    "cudaEventQuery", "cudaGetErrorString", "cudaEventSynchronize",
    "cudaStreamCreate", "cudaMemcpy", "cudaDeviceSynchronize",
    "fakeCudaLaunchHostFunc", "fakeCudaStreamSleep",
    "fakeCudaLiveAllocations", "fakeCudaIsDevicePointer"]
NCCL_NAMES = [
    "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank",
    "ncclCommDestroy", "ncclCommAbort", "ncclCommGetAsyncError",
    "ncclGetErrorString", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy",
    "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
    "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart",
    "ncclGroupEnd"]


@pytest.fixture(scope="module")
def cuda() -> FakeCuda:
    return fake_cuda()


@pytest.fixture(scope="module")
def nccl() -> FakeNccl:
    return FakeNccl()


def _exported(path: str) -> List[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines() if line)


# ---- build ----

def test_build_is_cached_and_exports_exactly_the_abi() -> None:
    libs = build()
    mtimes = {k: os.path.getmtime(v) for k, v in libs.items()}
    assert build() == libs
    assert {k: os.path.getmtime(v) for k, v in libs.items()} == mtimes
    if shutil.which("nm") is None:
        pytest.skip("nm not installed")
    assert _exported(libs["cudart"]) == sorted(ABI_NAMES)
    assert _exported(libs["nccl"]) == sorted(NCCL_NAMES)
    if shutil.which("readelf"):
        dyn = subprocess.run(["readelf", "-d", libs["nccl"]],
                             stdout=subprocess.PIPE, text=True).stdout
        assert "[libfakecudart.so]" in dyn and "[$ORIGIN]" in dyn


def test_nccl_loaded_first_shares_the_runtime_loaded_by_path() -> None:
    """dlopen(nccl) then dlopen(cudart by path): one runtime instance, so a
    stream and memory made through one are known to the other."""
    libs = build()
    code = r"""
import ctypes, sys
nccl = ctypes.CDLL(sys.argv[1])
cudart = ctypes.CDLL(sys.argv[2])
stream = ctypes.c_void_p()
assert cudart.cudaStreamCreate(ctypes.byref(stream)) == 0
buf = ctypes.c_void_p()
assert cudart.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(16)) == 0
uid = (ctypes.c_char * 128)()
assert nccl.ncclGetUniqueId(uid) == 0
class Id(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]
comm = ctypes.c_void_p()
nccl.ncclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, Id,
                                  ctypes.c_int]
assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, Id.from_buffer(uid),
                             0) == 0
nccl.ncclAllReduce.argtypes = [ctypes.c_void_p] * 2 + [
    ctypes.c_size_t, ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 2
rc = nccl.ncclAllReduce(buf, buf, 4, 7, 0, comm, stream)
assert rc == 0, rc
assert cudart.cudaStreamSynchronize(stream) == 0
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code, libs["nccl"],
                           libs["cudart"]], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout


# ---- CUDA runtime ----

def test_device_count_and_per_thread_device(cuda: FakeCuda,
                                            monkeypatch: Any) -> None:
    monkeypatch.delenv("FAKE_CUDA_DEVICES", raising=False)
    assert cuda.device_count() == 2
    monkeypatch.setenv("FAKE_CUDA_DEVICES", "3")
    assert cuda.device_count() == 3
    try:
        cuda.set_device(2)
        assert cuda.get_device() == 2
        seen: List[int] = []
        thread = threading.Thread(target=lambda: seen.append(
            cuda.get_device()))
        thread.start()
        thread.join(10)
        assert seen == [0]  # per thread, default 0
        assert cuda.lib.cudaSetDevice(3) == CUDA_ERROR_INVALID_DEVICE
        assert cuda.lib.cudaSetDevice(-1) == CUDA_ERROR_INVALID_DEVICE
        monkeypatch.setenv("FAKE_CUDA_DEVICES", "0")
        count = ctypes.c_int(-1)
        assert cuda.lib.cudaGetDeviceCount(ctypes.byref(count)) == \
            CUDA_ERROR_NO_DEVICE
        assert count.value == 0
        assert cuda.lib.cudaSetDevice(0) == CUDA_ERROR_NO_DEVICE
    finally:
        monkeypatch.setenv("FAKE_CUDA_DEVICES", "2")
        cuda.set_device(0)


def test_pci_bus_ids_tell_processes_apart_unless_shared(
        cuda: FakeCuda, monkeypatch: Any) -> None:
    """Each process has devices of its own (the pid is the bus id's
    domain); FAKE_CUDA_SHARED_DEVICES=1 makes device k one GPU of the
    machine, the same id in every process."""
    monkeypatch.delenv("FAKE_CUDA_SHARED_DEVICES", raising=False)
    assert cuda.pci_bus_id(0) == "%08x:01:00.0" % os.getpid()
    assert cuda.pci_bus_id(1) == "%08x:02:00.0" % os.getpid()
    monkeypatch.setenv("FAKE_CUDA_SHARED_DEVICES", "1")
    assert [cuda.pci_bus_id(d) for d in (0, 1)] == ["00000000:01:00.0",
                                                    "00000000:02:00.0"]
    small = ctypes.create_string_buffer(8)
    assert cuda.lib.cudaDeviceGetPCIBusId(small, 8, 0) == \
        CUDA_ERROR_INVALID_VALUE
    assert cuda.lib.cudaDeviceGetPCIBusId(small, 8, 2) == \
        CUDA_ERROR_INVALID_DEVICE


def test_version_and_error_strings(cuda: FakeCuda) -> None:
    assert cuda.runtime_version() == 12040
    for code, name in [(0, "cudaSuccess"), (1, "cudaErrorInvalidValue"),
                       (2, "cudaErrorMemoryAllocation"),
                       (100, "cudaErrorNoDevice"),
                       (101, "cudaErrorInvalidDevice"),
                       (400, "cudaErrorInvalidResourceHandle"),
                       (600, "cudaErrorNotReady")]:
        assert name in cuda.error_string(code)
    assert cuda.error_string(12345) == "unrecognized error code"


def test_malloc_and_free(cuda: FakeCuda) -> None:
    before = cuda.live_allocations()
    ptrs = [cuda.malloc(n) for n in (1, 63, 64, 1000)]
    assert all(p % 64 == 0 for p in ptrs)
    assert cuda.live_allocations() == before + 4
    assert cuda.is_device_pointer(ptrs[3] + 10, 990)
    assert not cuda.is_device_pointer(ptrs[3] + 10, 991)
    assert cuda.malloc(0) == 0
    assert cuda.lib.cudaFree(None) == 0
    assert cuda.lib.cudaFree(ptrs[0] + 8) == CUDA_ERROR_INVALID_VALUE
    host = np.zeros(4)
    assert cuda.lib.cudaFree(host.ctypes.data) == CUDA_ERROR_INVALID_VALUE
    for p in ptrs:
        cuda.free(p)
    assert cuda.lib.cudaFree(ptrs[0]) == CUDA_ERROR_INVALID_VALUE  # twice
    assert cuda.live_allocations() == before
    with pytest.raises(FakeCudaError) as err:
        cuda.free(12345)
    assert err.value.code == CUDA_ERROR_INVALID_VALUE


def test_copies_check_their_kind(cuda: FakeCuda) -> None:
    dev = cuda.malloc(32)
    host = np.arange(4, dtype=np.float64)
    out = np.zeros(4)
    lib = cuda.lib
    # HostToDevice into host memory, DeviceToHost from host memory.
    assert lib.cudaMemcpyAsync(out.ctypes.data, host.ctypes.data, 32, 1,
                               None) == CUDA_ERROR_INVALID_VALUE
    assert lib.cudaMemcpyAsync(out.ctypes.data, host.ctypes.data, 32, 2,
                               None) == CUDA_ERROR_INVALID_VALUE
    assert lib.cudaMemcpyAsync(dev, host.ctypes.data, 33, 1,
                               None) == CUDA_ERROR_INVALID_VALUE  # overrun
    assert lib.cudaMemcpyAsync(dev, host.ctypes.data, 32, 7,
                               None) == CUDA_ERROR_INVALID_VALUE  # kind
    assert lib.cudaMemcpy(dev, host.ctypes.data, 32, 1) == 0  # synchronous
    assert lib.cudaMemcpy(out.ctypes.data, dev, 32, 4) == 0  # default kind
    assert out.tolist() == host.tolist()
    assert lib.cudaMemsetAsync(out.ctypes.data, 0, 8, None) == \
        CUDA_ERROR_INVALID_VALUE
    cuda.memset(dev, 0, 32, 2)  # the per-thread default stream
    assert lib.cudaDeviceSynchronize() == 0
    cuda.memcpy_dtoh(out, dev)
    assert out.tolist() == [0.0] * 4
    cuda.free(dev)


def test_stream_ordering_with_events(cuda: FakeCuda) -> None:
    """A: sleep, then copy new data into X; event recorded on A. B waits
    for the event, then copies X to Y: Y has the new data."""
    a, b = cuda.stream_create(), cuda.stream_create()
    x, y = cuda.malloc(64), cuda.malloc(64)
    cuda.memcpy_htod(x, np.zeros(16, np.float32), a)
    cuda.stream_synchronize(a)
    event = cuda.event_create()
    cuda.sleep_on_stream(a, 500)
    cuda.memcpy_htod(x, np.arange(16, dtype=np.float32), a)
    cuda.event_record(event, a)
    cuda.stream_wait_event(b, event)
    cuda.memcpy_dtod(y, x, 64, b)
    assert not cuda.stream_query(a)
    assert not cuda.event_query(event)
    assert not cuda.stream_query(b)
    out = np.empty(16, np.float32)
    cuda.memcpy_dtoh(out, y, b)  # synchronizes b only
    assert out.tolist() == list(range(16))
    assert cuda.event_query(event)
    cuda.event_synchronize(event)
    cuda.stream_synchronize(a)
    assert cuda.stream_query(a) and cuda.stream_query(b)
    cuda.event_destroy(event)
    for s in (a, b):
        cuda.stream_destroy(s)
    cuda.free(x)
    cuda.free(y)


def test_event_semantics(cuda: FakeCuda) -> None:
    a, b, c = (cuda.stream_create() for _ in range(3))
    event = cuda.event_create()
    assert cuda.event_query(event)  # never recorded: complete
    cuda.event_synchronize(event)
    cuda.stream_wait_event(b, event)  # waits for nothing
    assert cuda.stream_query(b)
    # A wait takes the capture current at the call; re-recording the event
    # on an idle stream afterwards does not release it.
    x = cuda.malloc(8)
    cuda.sleep_on_stream(a, 300)
    cuda.memcpy_htod(x, np.array([7.0]), a)
    cuda.event_record(event, a)
    cuda.stream_wait_event(b, event)
    out = np.zeros(1)
    host_out = out.ctypes.data
    assert cuda.lib.cudaMemcpyAsync(host_out, x, 8, 2, b) == 0
    cuda.event_record(event, c)  # replaces the capture
    cuda.event_synchronize(event)  # the new capture: c is idle
    cuda.stream_synchronize(b)
    assert out[0] == 7.0
    cuda.event_destroy(event)
    assert cuda.lib.cudaEventQuery(event) == CUDA_ERROR_INVALID_HANDLE
    for s in (a, b, c):
        cuda.stream_destroy(s)
    cuda.free(x)


def test_stream_destroy_runs_queued_work(cuda: FakeCuda) -> None:
    s = cuda.stream_create()
    x = cuda.malloc(8)
    cuda.sleep_on_stream(s, 200)
    cuda.memcpy_htod(x, np.array([3.0]), s)
    cuda.stream_destroy(s)
    out = np.zeros(1)
    cuda.memcpy_dtoh(out, x)
    assert out[0] == 3.0
    assert cuda.lib.cudaStreamQuery(s) == CUDA_ERROR_INVALID_HANDLE
    assert cuda.lib.cudaStreamDestroy(s) == CUDA_ERROR_INVALID_HANDLE
    assert cuda.lib.cudaStreamDestroy(None) == CUDA_ERROR_INVALID_HANDLE
    assert cuda.lib.fakeCudaStreamSleep(s, 1) == CUDA_ERROR_INVALID_HANDLE
    cuda.free(x)


def test_free_waits_for_queued_work_without_blocking(cuda: FakeCuda) -> None:
    s = cuda.stream_create()
    x = cuda.malloc(1 << 20)
    cuda.sleep_on_stream(s, 1000)
    cuda.memset(x, 1, 1 << 20, s)  # runs after the free returned
    cuda.free(x)
    # The free returned while the stream was still busy with the sleep.
    assert not cuda.stream_query(s)
    assert not cuda.is_device_pointer(x, 1)
    cuda.stream_synchronize(s)  # the memset ran on memory still alive
    cuda.stream_destroy(s)


def test_threads_share_the_runtime(cuda: FakeCuda) -> None:
    errors: List[BaseException] = []

    def work(seed: int) -> None:
        try:
            s = cuda.stream_create()
            for i in range(30):
                data = np.full(100, seed * 1000 + i, np.int64)
                ptr = cuda.malloc(data.nbytes)
                cuda.memcpy_htod(ptr, data, s)
                out = np.empty_like(data)
                cuda.memcpy_dtoh(out, ptr, s)
                assert (out == data).all()
                cuda.free(ptr)
            cuda.stream_destroy(s)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not any(t.is_alive() for t in threads)


# ---- NCCL in one process ----

def test_nccl_version(nccl: FakeNccl, monkeypatch: Any) -> None:
    assert nccl.version() == 22304
    monkeypatch.setenv("FAKE_NCCL_VERSION", "21805")
    assert nccl.version() == 21805
    for code in range(8):
        assert nccl.error_string(code).startswith(
            ["ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
             "ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
             "ncclRemoteError", "ncclInProgress"][code])


def test_one_rank_communicator_scales_with_premulsum(
        cuda: FakeCuda, nccl: FakeNccl) -> None:
    """hbcore's scaling kernel: a 1-rank comm, a PreMulSum op, in place."""
    uid = nccl.get_unique_id()
    comm = nccl.comm_init_rank(1, uid, 0)
    other = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    x = FakeGpuArray(np.arange(10, dtype=np.float32))
    rc, op = nccl.premulsum(np.float32(0.25), NCCL_FLOAT32,
                            NCCL_SCALAR_HOST_IMMEDIATE, comm)
    assert (rc, op) == (NCCL_SUCCESS, 5)  # ids start at 5
    rc, op2 = nccl.premulsum(np.float32(2), NCCL_FLOAT32,
                             NCCL_SCALAR_HOST_IMMEDIATE, comm)
    assert (rc, op2) == (NCCL_SUCCESS, 6)
    assert nccl.premulsum(np.float32(2), NCCL_FLOAT32,
                          NCCL_SCALAR_HOST_IMMEDIATE, other) == (0, 5)
    assert nccl.all_reduce(x.ptr, x.ptr, 10, NCCL_FLOAT32, op, comm) == 0
    assert x.numpy().tolist() == [0.25 * i for i in range(10)]
    # A device-resident scalar (int32 this time).
    y = FakeGpuArray(np.arange(6, dtype=np.int32))
    scalar = FakeGpuArray(np.array([3], np.int32))
    rc, op3 = nccl.premulsum(scalar.ptr, NCCL_INT32, NCCL_SCALAR_DEVICE,
                             comm)
    assert (rc, op3) == (NCCL_SUCCESS, 7)
    out = FakeGpuArray.empty((6,), np.int32)
    assert nccl.all_reduce(y.ptr, out.ptr, 6, NCCL_INT32, op3, comm) == 0
    assert out.numpy().tolist() == [3 * i for i in range(6)]
    # An op is for its dtype and its comm; destroyed ids are reused.
    assert nccl.all_reduce(y.ptr, out.ptr, 6, NCCL_INT32, op, comm) == \
        NCCL_INVALID_ARGUMENT
    assert nccl.redop_destroy(op, comm) == NCCL_SUCCESS
    assert nccl.redop_destroy(op, comm) == NCCL_INVALID_ARGUMENT
    assert nccl.redop_destroy(NCCL_SUM, comm) == NCCL_INVALID_ARGUMENT
    assert nccl.premulsum(np.float32(1), NCCL_FLOAT32,
                          NCCL_SCALAR_HOST_IMMEDIATE, comm) == (0, 5)
    host_scalar = np.array([1], np.int32)
    assert nccl.premulsum(host_scalar.ctypes.data, NCCL_INT32,
                          NCCL_SCALAR_DEVICE, comm)[0] == \
        NCCL_INVALID_ARGUMENT  # device residence needs device memory
    assert nccl.comm_destroy(comm) == NCCL_SUCCESS
    assert nccl.comm_destroy(other) == NCCL_SUCCESS


def _all_halves(dtype: Any) -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_half_types_round_to_nearest_even(cuda: FakeCuda, nccl: FakeNccl,
                                          dtype_name: str) -> None:
    """Every 16-bit pattern through a 1-rank sum (exact round trip) and
    PreMulSum (float math, rounded once) against numpy / ml_dtypes."""
    if dtype_name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        dtype, nd = np.dtype(ml_dtypes.bfloat16), NCCL_BFLOAT16
    else:
        dtype, nd = np.dtype(np.float16), NCCL_FLOAT16
    values = _all_halves(dtype)
    comm = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    src = FakeGpuArray(values)
    out = FakeGpuArray.empty(values.shape, dtype)
    assert nccl.all_reduce(src.ptr, out.ptr, values.size, nd, NCCL_SUM,
                           comm) == 0
    got = out.numpy()
    nan = np.isnan(values.astype(np.float32))
    assert np.isnan(got[nan].astype(np.float32)).all()
    assert (got[~nan].view(np.uint16) == values[~nan].view(np.uint16)).all()
    # 3.0: overflow to infinity; 2^-10: into the subnormals; 0.1: inexact.
    for scalar in (0.1, 3.0, 2.0 ** -10):
        s = np.array(scalar, dtype)
        rc, op = nccl.premulsum(s, nd, NCCL_SCALAR_HOST_IMMEDIATE, comm)
        assert rc == 0
        assert nccl.all_reduce(src.ptr, out.ptr, values.size, nd, op,
                               comm) == 0
        with np.errstate(invalid="ignore", over="ignore"):
            want = (s.astype(np.float32) *
                    values.astype(np.float32)).astype(dtype)
        got = out.numpy()
        wnan = np.isnan(want.astype(np.float32))
        assert (np.isnan(got.astype(np.float32)) == wnan).all()
        assert (got[~wnan].view(np.uint16) ==
                want[~wnan].view(np.uint16)).all(), scalar
        nccl.redop_destroy(op, comm)
    assert nccl.comm_destroy(comm) == 0


def test_nccl_argument_errors(cuda: FakeCuda, nccl: FakeNccl) -> None:
    comm = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    x = FakeGpuArray(np.ones(4, np.float32))
    host = np.ones(4, np.float32)
    assert nccl.all_reduce(x.ptr, x.ptr, 4, 10, NCCL_SUM, comm) == \
        NCCL_INVALID_ARGUMENT  # data type
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, 9, comm) == \
        NCCL_INVALID_ARGUMENT  # op
    assert nccl.all_reduce(host.ctypes.data, x.ptr, 4, NCCL_FLOAT32,
                           NCCL_SUM, comm) == NCCL_INVALID_ARGUMENT
    assert nccl.all_reduce(x.ptr, x.ptr, 5, NCCL_FLOAT32, NCCL_SUM,
                           comm) == NCCL_INVALID_ARGUMENT  # overrun
    assert nccl.broadcast(x.ptr, x.ptr, 4, NCCL_FLOAT32, 1, comm) == \
        NCCL_INVALID_ARGUMENT  # root
    assert nccl.send(x.ptr, 4, NCCL_FLOAT32, -1, comm) == \
        NCCL_INVALID_ARGUMENT  # peer
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, NCCL_SUM, comm,
                           0x12345670) == NCCL_INVALID_ARGUMENT  # stream
    assert nccl.all_reduce(0, 0, 0, NCCL_FLOAT32, NCCL_SUM, comm) == 0
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, NCCL_SUM, 0) == \
        NCCL_INVALID_ARGUMENT  # NULL comm
    assert nccl.init_rank(2, nccl.get_unique_id(), 2)[0] == \
        NCCL_INVALID_ARGUMENT
    assert nccl.init_rank(1, bytes(128), 0)[0] == NCCL_INVALID_ARGUMENT
    # An aborted (or destroyed) comm: later calls fail cleanly.
    assert nccl.comm_abort(comm) == 0
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, NCCL_SUM,
                           comm) == NCCL_INVALID_USAGE
    assert nccl.async_error(comm)[0] == NCCL_INVALID_USAGE
    assert nccl.comm_abort(comm) == NCCL_INVALID_USAGE
    assert nccl.comm_destroy(comm) == NCCL_INVALID_USAGE
    cuda.device_synchronize()


def test_groups(cuda: FakeCuda, nccl: FakeNccl) -> None:
    assert nccl.group_end() == NCCL_INVALID_USAGE  # no group open
    comm = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    other = nccl.comm_init_rank(1, nccl.get_unique_id(), 0)
    s = cuda.stream_create()
    x = FakeGpuArray(np.arange(4, dtype=np.float32), stream=s)
    y = FakeGpuArray.empty((4,), np.float32, stream=s)
    # Nested groups run as one task at the outermost end, on the stream.
    cuda.sleep_on_stream(s, 500)
    assert nccl.group_start() == 0
    assert nccl.group_start() == 0
    assert nccl.send(x.ptr, 4, NCCL_FLOAT32, 0, comm, s) == 0
    assert nccl.group_end() == 0
    assert nccl.recv(y.ptr, 4, NCCL_FLOAT32, 0, comm, s) == 0
    assert cuda.stream_query(s) is False  # only the sleep so far
    assert nccl.group_end() == 0
    assert y.numpy().tolist() == [0, 1, 2, 3]
    # One comm and one stream per group (a limitation of the fake).
    assert nccl.group_start() == 0
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, NCCL_SUM,
                           comm, s) == 0
    assert nccl.all_reduce(x.ptr, x.ptr, 4, NCCL_FLOAT32, NCCL_SUM,
                           other, s) == NCCL_INVALID_USAGE
    assert nccl.group_end() == NCCL_INVALID_USAGE
    cuda.stream_synchronize(s)
    assert x.numpy().tolist() == [0, 1, 2, 3]  # the failed group never ran
    assert nccl.comm_destroy(comm) == 0
    assert nccl.comm_destroy(other) == 0
    cuda.stream_destroy(s)


def _init_in_threads(nccl: FakeNccl, uid: bytes,
                     ranks: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """ncclCommInitRank(nranks, uid, rank) for each (nranks, rank), each in
    its own thread of this process."""
    results: List[Optional[Tuple[int, int]]] = [None] * len(ranks)

    def init(i: int) -> None:
        results[i] = nccl.init_rank(ranks[i][0], uid, ranks[i][1])

    threads = [threading.Thread(target=init, args=(i,))
               for i in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return [r for r in results if r is not None]


def test_init_errors(nccl: FakeNccl, monkeypatch: Any) -> None:
    monkeypatch.setenv("FAKE_NCCL_TIMEOUT_S", "0.5")
    # Alone in a 2-rank communicator: timeout.
    uid = nccl.get_unique_id()
    start = time.monotonic()
    assert nccl.init_rank(2, uid, 0)[0] == NCCL_SYSTEM_ERROR
    assert 0.4 < time.monotonic() - start < 60  # gave up after the timeout
    assert shm_files(uid) == []
    # nranks disagree: the rank that sees it says so (the other may only
    # time out, if the peer left before it looked).
    uid = nccl.get_unique_id()
    rcs = [rc for rc, _ in _init_in_threads(nccl, uid, [(2, 0), (3, 1)])]
    assert NCCL_INVALID_ARGUMENT in rcs
    assert set(rcs) <= {NCCL_INVALID_ARGUMENT, NCCL_SYSTEM_ERROR}
    assert shm_files(uid) == []
    # The same rank twice: the second is refused, the first times out. The
    # first waits long enough that the second surely finds it still there.
    monkeypatch.setenv("FAKE_NCCL_TIMEOUT_S", "3")
    uid = nccl.get_unique_id()
    results: List[int] = []
    first = threading.Thread(target=lambda: results.append(
        nccl.init_rank(2, uid, 0)[0]))
    first.start()
    # Wait (up to 5 s, then go on) for rank 0's published segment (not its
    # staging file, which Publish links into place afterwards).
    poll_until(lambda: any(f.endswith("-init") for f in shm_files(uid)), 5,
               interval=0.01)
    assert nccl.init_rank(2, uid, 0)[0] == NCCL_INVALID_ARGUMENT
    first.join(10)
    assert results == [NCCL_SYSTEM_ERROR]
    assert shm_files(uid) == []


def test_timeout_sets_remote_error(cuda: FakeCuda, nccl: FakeNccl,
                                   monkeypatch: Any) -> None:
    """Rank 1 (a thread) joins the communicator but never the allreduce:
    rank 0's task gives up after FAKE_NCCL_TIMEOUT_S with ncclRemoteError."""
    monkeypatch.setenv("FAKE_NCCL_TIMEOUT_S", "1")
    uid = nccl.get_unique_id()
    (rc0, comm0), (rc1, comm1) = _init_in_threads(nccl, uid,
                                                  [(2, 0), (2, 1)])
    assert rc0 == rc1 == NCCL_SUCCESS
    assert nccl.comm_destroy(comm1) == 0
    s = cuda.stream_create()
    x = FakeGpuArray(np.ones(8, np.float32), stream=s)
    start = time.monotonic()
    assert nccl.all_reduce(x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm0,
                           s) == 0
    cuda.stream_synchronize(s)
    assert 0.9 < time.monotonic() - start < 60  # gave up after the timeout
    assert nccl.async_error(comm0) == (NCCL_SUCCESS, NCCL_REMOTE_ERROR)
    # A new call on the broken comm returns its error and enqueues nothing.
    assert nccl.all_reduce(x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm0,
                           s) == NCCL_REMOTE_ERROR
    assert nccl.comm_destroy(comm0) == 0
    assert shm_files(uid) == []
    cuda.stream_destroy(s)


# ---- DLPack ----

def _dlpack_dtypes() -> List[np.dtype]:
    out = [np.dtype(t) for t in (np.float32, np.float16, np.float64,
                                 np.int8, np.uint8, np.int32, np.int64,
                                 np.uint64, np.bool_)]
    try:
        import ml_dtypes
        out.append(np.dtype(ml_dtypes.bfloat16))
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (5,)])
def test_dlpack_round_trip(cuda: FakeCuda, shape: Tuple[int, ...]) -> None:
    before = cuda.live_allocations()
    for dtype in _dlpack_dtypes():
        host = (np.arange(int(np.prod(shape))) % 7).reshape(shape) \
            .astype(dtype)
        arr = FakeGpuArray(host, device=1)
        assert arr.__dlpack_device__() == (2, 1)
        got = from_dlpack_capsule(arr)
        assert got.dtype == dtype and got.shape == shape
        assert np.array_equal(got.astype(np.float64),
                              host.astype(np.float64))
        assert arr.exports_released == 1 and arr.live_exports == 0
        del arr
    assert live_dlpack_exports() == 0
    assert cuda.live_allocations() == before


def test_dlpack_capsule_deleter_runs_exactly_once(cuda: FakeCuda) -> None:
    get_name = ctypes.PyDLL(ctypes.pythonapi._name).PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    arr = FakeGpuArray(np.arange(3, dtype=np.int32))
    # Not consumed: the capsule's destructor calls the deleter.
    capsule = arr.__dlpack__()
    assert get_name(capsule) == b"dltensor"
    assert arr.live_exports == 1
    del capsule
    assert arr.exports_released == 1
    # Consumed by the reader: renamed, deleter called by the consumer only.
    capsule = arr.__dlpack__(stream=-1)
    assert from_dlpack_capsule(capsule).tolist() == [0, 1, 2]
    assert get_name(capsule) == b"used_dltensor"
    assert arr.exports_released == 2
    with pytest.raises(ValueError):  # already consumed
        from_dlpack_capsule(capsule)
    del capsule
    assert arr.exports_released == 2
    assert live_dlpack_exports() == 0
    # The exports kept the array alive; it frees itself afterwards.
    ptr = arr.ptr
    del arr
    assert not cuda.is_device_pointer(ptr, 1)


def test_dlpack_orders_producer_work_before_consumer_stream(
        cuda: FakeCuda) -> None:
    producer = cuda.stream_create()
    consumer = cuda.stream_create()
    arr = FakeGpuArray(np.zeros(4, np.float32), stream=producer)
    cuda.stream_synchronize(producer)
    cuda.sleep_on_stream(producer, 300)
    cuda.memcpy_htod(arr.ptr, np.arange(4, dtype=np.float32), producer)
    capsule = arr.__dlpack__(stream=consumer)
    # The consumer reads on its own stream: it must see the new data.
    out = np.zeros(4, np.float32)
    cuda.memcpy_dtoh(out, arr.ptr, consumer)
    assert out.tolist() == [0, 1, 2, 3]
    del capsule
    # Legacy and per-thread default streams are one stream in the fake.
    cuda.sleep_on_stream(producer, 200)
    cuda.memset(arr.ptr, 0, 16, producer)
    from_dlpack_capsule(arr)  # asks for stream 1, then synchronizes it
    assert arr.numpy().tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError):
        arr.__dlpack__(stream=0)
    with pytest.raises(BufferError):
        arr.__dlpack__(dl_device=(1, 0))
    copy = from_dlpack_capsule(arr.__dlpack__(copy=True, stream=-1))
    assert copy.tolist() == [0, 0, 0, 0]
    del arr
    assert live_dlpack_exports() == 0
    cuda.stream_destroy(producer)
    cuda.stream_destroy(consumer)


# ---- NCCL across processes ----

def run_ranks(scenario: str, nranks: int,
              env: Optional[Dict[str, str]] = None, timeout: float = 60.0,
              uid: Optional[bytes] = None) -> List[Dict[str, Any]]:
    """Runs tests/fake_gpu/selftest_rank.py SCENARIO as nranks processes
    (killed after `timeout`); returns each rank's RESULT and checks that
    every rank exited 0 and no shm file of the communicator is left."""
    uid = uid or FakeNccl().get_unique_id()
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(
        [TESTS_DIR] + ([full_env["PYTHONPATH"]]
                       if full_env.get("PYTHONPATH") else []))
    full_env.setdefault("OMP_NUM_THREADS", "1")
    outputs: List[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(nranks):
            log = open(os.path.join(tmp, "rank%d.log" % rank), "w+")
            procs.append((subprocess.Popen(
                [sys.executable, "-m", "fake_gpu.selftest_rank", scenario,
                 str(rank), str(nranks), uid.hex()],
                stdout=log, stderr=subprocess.STDOUT, env=full_env,
                cwd=TESTS_DIR), log))
        deadline = time.monotonic() + timeout
        timed_out = False
        for proc, _ in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.seek(0)
            outputs.append(log.read())
            log.close()
    report = "\n".join("--- rank %d (exit %s) ---\n%s"
                       % (r, procs[r][0].returncode, outputs[r])
                       for r in range(nranks))
    if timed_out:
        pytest.fail("%s timed out after %s s\n%s" % (scenario, timeout,
                                                     report))
    assert all(p.returncode == 0 for p, _ in procs), report
    results = []
    for out in outputs:
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        assert len(lines) == 1, report
        results.append(json.loads(lines[0][len("RESULT "):]))
    assert shm_files(uid) == [], "left behind: %s" % shm_files(uid)
    return results


@pytest.mark.parametrize("nranks", [2, 3])
def test_collectives_match_numpy(nranks: int) -> None:
    """All reductions x data types (in place and not), allgather,
    reducescatter, broadcast, reduce, and the groups hbcore issues: an
    uneven alltoall of sends/receives, an uneven allgather of broadcasts,
    an uneven reducescatter of reduces."""
    results = run_ranks("collectives", nranks)
    assert all(r["cases"] >= 70 for r in results)


def test_large_allreduce() -> None:
    """Every rank's 64 MB float32 allreduce equals the sum (checked on
    the rank); the time is for the log."""
    results = run_ranks("large", 2)
    for rank, result in enumerate(results):
        assert "64 MB allreduce result" in result["passed"], (rank, result)
    seconds = max(r["seconds"] for r in results)
    print("64 MB float32 allreduce, 2 ranks: %.3f s" % seconds)


def test_abort_unblocks_a_rank_whose_peer_never_joins() -> None:
    results = run_ranks("abort", 2)
    # Well before the fake's own 120 s timeout: the abort ended the wait.
    assert results[0]["abort_seconds"] < 60.0


# What _abort_and_check in the rank script checks, in order, after a
# healthy rank's call waited for a peer that failed.
_ABORTED = ["abort", "async error after abort", "destroy after abort",
            "stream after abort"]


def test_injected_sync_failure() -> None:
    """Call 2 fails at once on the failing rank (then its async error and
    abort are clean); the healthy rank's call 2 is accepted, never
    completes, and its abort ends the wait."""
    healthy, failing = run_ranks(
        "inject_sync", 2, env={"FAKE_NCCL_FAIL_RANK": "1",
                               "FAKE_NCCL_FAIL_AT": "2",
                               "FAKE_NCCL_FAIL_MODE": "sync"})
    assert failing["passed"] == ["call 1", "call 1",
                                 "call 2 on the failing rank",
                                 "async error", "abort"], failing
    assert healthy["passed"] == ["call 1", "call 1",
                                 "call 2 on the healthy rank"] + _ABORTED, (
        healthy)


def test_injected_async_failure() -> None:
    """Call 2 is accepted on both ranks; its async error shows on the
    failing rank (and fails call 3); the healthy rank's call 2 never
    completes, it sees no async error, and its abort ends the wait."""
    healthy, failing = run_ranks(
        "inject_async", 2, env={"FAKE_NCCL_FAIL_RANK": "1",
                                "FAKE_NCCL_FAIL_AT": "2",
                                "FAKE_NCCL_FAIL_MODE": "async"})
    assert failing["passed"][-4:] == ["call 2", "async error", "call 3",
                                      "abort"], failing
    assert healthy["passed"][-6:] == ["call 2",
                                      "async error of the healthy rank"
                                      ] + _ABORTED, healthy


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_stale_init_segment(uid: bytes, rank: int, pid: int) -> str:
    """Writes rank `rank`'s init segment of a 2-rank communicator as process
    `pid` would have; returns its path."""
    # SegmentHeader (fake_shm.h): magic, owner pid, owner rank, nranks,
    # kind (8: init); payload 0; one reader expected.
    header = struct.pack("<QiiiiiiiiQQQQII", 0x31474553434e4b46, pid,
                         rank, 2, 8, 0, -1, 0, 0, 0, 0, 0, 0, 1, 0)
    path = os.path.join(SHM_DIR, "%so%d-init" % (shm_prefix(uid), rank))
    with open(path, "wb") as f:
        f.write(header.ljust(128, b"\0"))
    return path


def test_stale_files_of_a_dead_process_are_tolerated() -> None:
    """Leftover init segments of a crashed run with the same id (written by
    a process that no longer exists) do not break a new rendezvous."""
    uid = FakeNccl().get_unique_id()
    pid = _dead_pid()
    for rank in range(2):
        _write_stale_init_segment(uid, rank, pid)
    try:
        results = run_ranks("basic", 2, uid=uid)
        for rank, result in enumerate(results):
            assert "allreduce" in result["passed"], (rank, result)
    finally:
        for name in shm_files(uid):
            os.unlink(os.path.join(SHM_DIR, name))


def test_only_the_owner_removes_its_stale_init_segment(
        nccl: FakeNccl, monkeypatch: Any) -> None:
    """A peer that finds a dead process's segment waits for its owner to
    replace it and never unlinks it: the owner may have published a fresh
    segment at that path between the peer's read and its unlink (the race
    behind a CI failure, where rank 0 found its own stale file gone and
    took itself for a second rank 0)."""
    monkeypatch.setenv("FAKE_NCCL_TIMEOUT_S", "0.5")
    uid = nccl.get_unique_id()
    stale = _write_stale_init_segment(uid, 0, _dead_pid())
    try:
        assert nccl.init_rank(2, uid, 1)[0] == NCCL_SYSTEM_ERROR
        assert os.path.exists(stale)
    finally:
        for name in shm_files(uid):
            os.unlink(os.path.join(SHM_DIR, name))


def test_exit_with_an_open_communicator_removes_its_files() -> None:
    """Rank 0 exits while its allreduce waits for rank 1 (which never
    joins), without destroying its communicator: its files still go
    (run_ranks asserts that no file of the communicator is left)."""
    leaving = run_ranks("exit_open", 2)[1]
    assert leaving["passed"] == ["destroy"], leaving
