"""hbcore's GPU allreduce against raw NCCL on the same device buffers, in one
run, one table.

Run (one process per GPU: NCCL cannot run two ranks on one GPU)::

    hbrun -np 2 python benchmarks/nccl.py
    python -m hbcore.run python benchmarks/nccl.py     # one worker per GPU
    ... benchmarks/nccl.py --quick                     # 4 B .. 1 MiB, fewer reps
    ... benchmarks/nccl.py --max-bytes 16777216 --json out.json

Needs hbcore's GPU support (``pip install "hbcore[gpu]"``; ``hbrun
--check-build`` says what was found). Rank 0 prints the table.

Every row allreduces (Sum, in place) one float32 buffer of device memory:

    hbcore     hbcore.allreduce_(x, op=Sum) on an hbcore.GpuArray (negotiated
               by hbcore's background thread, then ncclAllReduce on its
               stream, synchronized before the call returns).
    raw NCCL   ncclAllReduce on the same buffer with a communicator of the
               same ranks, then a stream synchronize: CuPy's NCCL bindings
               when CuPy is installed, else direct ctypes calls into the
               NCCL library hbcore loaded (the same code either way).

Each figure is the median over repetitions of the slowest rank's time per
call (benchmarks/_timing.py: a barrier before every repetition, the two
interleaved in alternating order). bus bandwidth = bytes * 2 * (n - 1) / n
/ time (n = ranks, the NCCL tests' definition). ratio = raw NCCL time /
hbcore time: above 1 means hbcore is faster. Target (issue 11): ratio
>= 0.9 for buffers of 64 MiB and more, printed as PASS/FAIL at 2 or
more ranks (one rank's NCCL allreduce moves no data).
"""
import argparse
import ctypes
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import hbcore_paths  # noqa: E402
from _timing import measure  # noqa: E402

sys.path[:0] = hbcore_paths()

LARGE_BYTES = 64 << 20
TARGET_RATIO = 0.9

NCCL_FLOAT32 = 7
NCCL_SUM = 0


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class RawNccl:
    """One NCCL communicator of the job's ranks and a stream, outside
    hbcore, allreducing raw device pointers: through CuPy when installed,
    else ctypes into the NCCL library hbcore loaded."""

    def __init__(self, comm: Any, info: Dict[str, str], device: int) -> None:
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError:
            cupy = None
        if cupy is not None:
            self.kind = "CuPy %s" % cupy.__version__
            cupy.cuda.Device(device).use()
            uid = nccl.get_unique_id() if self.rank == 0 else None
            uid = comm.bcast(uid, root=0)
            self._comm = nccl.NcclCommunicator(self.size, uid, self.rank)
            self._stream = cupy.cuda.Stream(non_blocking=True)
            self._allreduce = lambda ptr, count: (
                self._comm.allReduce(ptr, ptr, count, nccl.NCCL_FLOAT32,
                                     nccl.NCCL_SUM, self._stream.ptr),
                self._stream.synchronize())
            return
        self.kind = "ctypes"
        cuda = ctypes.CDLL(info["cuda_runtime_library"])
        lib = ctypes.CDLL(info["nccl_library"])
        check = _checker(cuda, lib)
        check("cudaSetDevice", cuda.cudaSetDevice(device))
        stream = ctypes.c_void_p()
        check("cudaStreamCreateWithFlags",
              cuda.cudaStreamCreateWithFlags(ctypes.byref(stream), 1))
        uid = NcclUniqueId()
        if self.rank == 0:
            check("ncclGetUniqueId", lib.ncclGetUniqueId(ctypes.byref(uid)),
                  nccl=True)
        # All 128 bytes travel: the id is binary, and ``uid.internal`` (a
        # c_char array) would stop at its first zero byte.
        raw_id = comm.bcast(bytes(uid), root=0)
        ctypes.memmove(ctypes.addressof(uid), raw_id, ctypes.sizeof(uid))
        handle = ctypes.c_void_p()
        lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.c_int, NcclUniqueId,
                                         ctypes.c_int]
        check("ncclCommInitRank", lib.ncclCommInitRank(
            ctypes.byref(handle), self.size, uid, self.rank), nccl=True)
        lib.ncclAllReduce.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self._keep = (cuda, lib, stream, handle)

        def allreduce(ptr: int, count: int) -> None:
            check("ncclAllReduce", lib.ncclAllReduce(
                ptr, ptr, count, NCCL_FLOAT32, NCCL_SUM, handle, stream),
                nccl=True)
            check("cudaStreamSynchronize", cuda.cudaStreamSynchronize(stream))
        self._allreduce = allreduce

    def allreduce(self, ptr: int, count: int) -> None:
        self._allreduce(ptr, count)


def _checker(cuda: Any, nccl: Any) -> Callable[..., None]:
    """check(what, code, nccl=False): SystemExit naming the failed call."""
    cuda.cudaGetErrorString.restype = ctypes.c_char_p
    nccl.ncclGetErrorString.restype = ctypes.c_char_p

    def check(what: str, code: int, nccl: bool = False) -> None:
        if code != 0:
            text = (nccl_error(code) if nccl else cuda.cudaGetErrorString(code))
            raise SystemExit("%s failed: %s (%d)" % (what, text, code))
    nccl_error = nccl.ncclGetErrorString
    return check


def sizes(max_bytes: int) -> List[int]:
    out, n = [], 4
    while n <= max_bytes:
        out.append(n)
        n *= 4
    if out[-1] != max_bytes and max_bytes > 4:
        out.append(max_bytes)
    return out


def reps_for(nbytes: int, quick: bool) -> Dict[str, int]:
    if nbytes <= 1 << 16:
        return {"reps": 5 if quick else 15, "inner": 20 if quick else 50}
    if nbytes <= 16 << 20:
        return {"reps": 5 if quick else 11, "inner": 5}
    return {"reps": 3 if quick else 7, "inner": 1}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-bytes", type=int, default=256 << 20,
                        help="largest buffer (default 256 MiB)")
    parser.add_argument("--quick", action="store_true",
                        help="4 B .. 1 MiB with fewer repetitions")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_bytes = min(args.max_bytes, 1 << 20)

    from mpi4py import MPI
    import hbcore as hb
    hb.init()
    comm = MPI.COMM_WORLD
    rank, size = hb.rank(), hb.size()
    if not hb.nccl_built():
        if rank == 0:
            print("benchmarks/nccl.py: hbcore has no GPU support here: %s"
                  % hb.gpu_info().get("error", "unknown reason"))
        return 2
    info = hb.gpu_info()
    # One process per GPU: the GPU of its local rank (hbcore.run gives
    # each worker one visible GPU, so there it is GPU 0).
    device = hb.local_rank() % max(1, int(info.get("cuda_devices") or 1))
    raw = RawNccl(comm, info, device)

    from hbcore._native import core
    rows = []
    for nbytes in sizes(args.max_bytes):
        count = max(1, nbytes // 4)
        buf = core.gpu_empty(device, [count], core.HB_FLOAT32)
        ptr = buf.__cuda_array_interface__["data"][0]
        name = "nccl.bench.%d" % nbytes

        def hbcore_call(buf=buf, name=name) -> None:
            hb.allreduce_(buf, op=hb.Sum, name=name)

        def raw_call(ptr=ptr, count=count) -> None:
            raw.allreduce(ptr, count)
        t_hb, t_raw = measure(comm, [hbcore_call, raw_call],
                              **reps_for(nbytes, args.quick))
        factor = 2.0 * (size - 1) / size if size > 1 else 1.0
        rows.append({"bytes": count * 4, "hbcore_s": t_hb, "raw_s": t_raw,
                     "hbcore_busbw_GBps": count * 4 * factor / t_hb / 1e9,
                     "raw_busbw_GBps": count * 4 * factor / t_raw / 1e9,
                     "ratio": t_raw / t_hb})
        del buf
    if rank == 0:
        print("hbcore GPU allreduce vs raw NCCL (%s), %d ranks, float32 Sum "
              "in place" % (raw.kind, size))
        print("NCCL %s (%s); CUDA runtime %s; %s device(s)" % (
            info.get("nccl_version"), info.get("nccl_library"),
            info.get("cuda_runtime_version"), info.get("cuda_devices")))
        print("%12s %12s %12s %12s %12s %7s  %s" % (
            "bytes", "hbcore us", "raw us", "hbcore GB/s", "raw GB/s",
            "ratio", "target"))
        for r in rows:
            target = ""
            if r["bytes"] >= LARGE_BYTES and size > 1:
                target = ">= %.1f %s" % (TARGET_RATIO, "PASS" if r["ratio"]
                                         >= TARGET_RATIO else "FAIL")
            print("%12d %12.1f %12.1f %12.3f %12.3f %7.2f  %s" % (
                r["bytes"], r["hbcore_s"] * 1e6, r["raw_s"] * 1e6,
                r["hbcore_busbw_GBps"], r["raw_busbw_GBps"], r["ratio"],
                target))
        if size == 1:
            # One rank's NCCL allreduce moves no data, so the ratio is
            # hbcore's fixed cost per call, not the bandwidth target's.
            print("1 rank: NCCL moves no data (raw = its launch cost); the "
                  "0.9x target needs 2 or more GPUs")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "reference": raw.kind,
                           "gpu_info": info, "rows": rows}, f, indent=1)
    hb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
