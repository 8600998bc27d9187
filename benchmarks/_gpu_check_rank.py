"""One rank of benchmarks/gpu_check.py (run by it under ``hbrun -np N``).

Every rank runs the same checks in the same order, appends one JSON line
per check to ``<out>/rank<r>.jsonl`` as soon as the check ends (a job that
hangs or dies still shows how far it got), and rank 0 adds the bandwidth
rows. gpu_check.py merges the ranks' lines into its tables.

GPU memory is hbcore's own (``hbcore.GpuArray``) filled and read through
the CUDA runtime hbcore loaded (ctypes: cudaMemcpy), so the numpy-API
checks need no CuPy or PyTorch and run the same on a real GPU and on the
fake runtime of tests/fake_gpu. Each rank takes GPU ``local_rank % (GPUs
it sees)``; ranks whose GPUs have the same PCI bus id on one host share a
GPU, which NCCL cannot serve: those jobs check that hbcore refuses.

Expected values come from numpy on every rank's inputs (rank-seeded,
integer-valued, so float sums are exact), never from hbcore.
"""
import ctypes
import dataclasses
import json
import os
import re
import socket
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _launch import hbcore_paths  # noqa: E402
from _timing import measure  # noqa: E402

sys.path[:0] = hbcore_paths()

import hbcore as hb  # noqa: E402
from hbcore._native import core  # noqa: E402
from hbcore.exceptions import UnsupportedError  # noqa: E402

PASS, FAIL, NOT_RUN, NA = "PASS", "FAIL", "NOT RUN", "N/A"

# What hbcore's refusal of two ranks on one GPU says (nccl_backend.cc).
SHARED_GPU_TEXT = "NCCL cannot run two ranks of a communicator on one GPU"

_CUDA_H2D, _CUDA_D2H = 1, 2
_HB_DTYPES = {np.dtype(np.uint8): "HB_UINT8", np.dtype(np.int8): "HB_INT8",
              np.dtype(np.int32): "HB_INT32", np.dtype(np.int64): "HB_INT64",
              np.dtype(np.float16): "HB_FLOAT16",
              np.dtype(np.float32): "HB_FLOAT32",
              np.dtype(np.float64): "HB_FLOAT64",
              np.dtype(np.bool_): "HB_BOOL"}


class CheckFailed(AssertionError):
    """A check's comparison did not hold; the message has the numbers."""


class Report:
    """This rank's rows, appended to ``<out>/rank<r>.jsonl`` as they end.

    A row: ``kind`` ("check", "info" or "bandwidth"), and for checks
    ``section``, ``check``, ``device``, ``status`` (PASS, FAIL, NOT RUN,
    N/A) and ``detail`` (the numbers compared, or why).
    """

    def __init__(self, out_dir: str, rank: int) -> None:
        self.path = os.path.join(out_dir, "rank%d.jsonl" % rank)
        self.rank = rank
        open(self.path, "w").close()

    def _write(self, row: Dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def info(self, **values: Any) -> None:
        """Records facts about this rank (libraries, devices)."""
        self._write(dict(kind="info", **values))

    def bandwidth(self, **values: Any) -> None:
        """Records one row of the bandwidth table."""
        self._write(dict(kind="bandwidth", **values))

    def add(self, section: str, check: str, device: str, status: str,
            detail: str) -> None:
        """Records one check's outcome."""
        self._write(dict(kind="check", section=section, check=check,
                         device=device, status=status, detail=detail))

    def run(self, section: str, check: str, device: str,
            fn: Callable[[], str]) -> bool:
        """Runs ``fn`` (which returns what it compared, or raises) and
        records PASS or FAIL; returns whether it passed."""
        try:
            detail = fn()
        except CheckFailed as exc:
            self.add(section, check, device, FAIL, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - any error fails the check
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            self.add(section, check, device, FAIL, "%s: %s (at %s:%d)" % (
                type(exc).__name__, str(exc)[:600],
                os.path.basename(frame.filename), frame.lineno))
            return False
        self.add(section, check, device, PASS, detail)
        return True


def compare(got: Any, want: np.ndarray, rtol: float, what: str = "") -> str:
    """Checks ``got`` against ``want`` (shape, dtype, values to ``rtol``
    of the largest magnitude; 0 means exact).

    Returns:
        The comparison as text, e.g. ``max|err| 0 <= 0``.

    Raises:
        CheckFailed: shapes, dtypes or values differ.
    """
    got = np.asarray(got)
    prefix = what + ": " if what else ""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise CheckFailed("%sgot %s %s, want %s %s" % (
            prefix, got.dtype, got.shape, want.dtype, want.shape))
    if want.size == 0:
        return "empty"
    g, w = got.astype(np.float64), want.astype(np.float64)
    err = float(np.max(np.abs(g - w)))
    tol = rtol * max(1.0, float(np.max(np.abs(w))))
    if not err <= tol:
        where = int(np.argmax(np.abs(g - w)))
        raise CheckFailed(
            "%smax|err| %.6g > %.3g (at %d: got %.9g, want %.9g)" % (
                prefix, err, tol, where, g.flat[where], w.flat[where]))
    return "max|err| %.3g <= %.3g" % (err, tol)


class CudaRuntime:
    """The CUDA runtime library hbcore loaded (a real one or the fake),
    through ctypes: copies between numpy arrays and ``hbcore.GpuArray``
    device memory, and a device's PCI bus id."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)  # the instance hbcore loaded
        self.lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_size_t, ctypes.c_int]
        self.lib.cudaDeviceGetPCIBusId.argtypes = [
            ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self.lib.cudaSetDevice.argtypes = [ctypes.c_int]
        self.lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p

    def _check(self, what: str, rc: int) -> None:
        if rc != 0:
            raise RuntimeError("%s failed: CUDA error %d (%s)" % (
                what, rc, self.lib.cudaGetErrorString(rc).decode()))

    def set_device(self, device: int) -> None:
        """cudaSetDevice for this thread."""
        self._check("cudaSetDevice", self.lib.cudaSetDevice(device))

    def bus_id(self, device: int) -> str:
        """The PCI bus id of ``device``."""
        buffer = ctypes.create_string_buffer(64)
        self._check("cudaDeviceGetPCIBusId", self.lib.cudaDeviceGetPCIBusId(
            buffer, len(buffer), device))
        return buffer.value.decode()

    def upload(self, array: np.ndarray, device: int) -> Any:
        """A new hbcore.GpuArray on ``device`` holding ``array``."""
        array = np.ascontiguousarray(array)
        out = core.gpu_empty(device, list(array.shape),
                             getattr(core, _HB_DTYPES[array.dtype]))
        if array.nbytes:
            self._check("cudaMemcpy (host to device)", self.lib.cudaMemcpy(
                out.__cuda_array_interface__["data"][0], array.ctypes.data,
                array.nbytes, _CUDA_H2D))
        return out

    def download(self, gpu_array: Any) -> np.ndarray:
        """A numpy copy of an hbcore.GpuArray."""
        out = np.empty(gpu_array.shape, gpu_array.dtype)
        if out.nbytes:
            self._check("cudaMemcpy (device to host)", self.lib.cudaMemcpy(
                out.ctypes.data, gpu_array.__cuda_array_interface__["data"][0],
                out.nbytes, _CUDA_D2H))
        return out


@dataclasses.dataclass
class Case:
    """One collective call checked against numpy, written once for both
    front ends: ``call(api, tensors, name)`` takes the module (``hbcore``
    or ``hbcore_tf``, the same verbs and keywords) and this rank's inputs
    on the device, and returns the list of outputs."""
    name: str
    inputs: List[np.ndarray]
    call: Callable[[Any, List[Any], str], List[Any]]
    expected: List[np.ndarray]
    rtol: float = 0.0


def rank_data(seed: int, rank: int, shape: Sequence[int],
              dtype: Any) -> np.ndarray:
    """Rank ``rank``'s integer-valued input (small values: sums and
    products of a few ranks are exact in every dtype).

    Args:
        seed: the case's seed (every rank computes every rank's input).
        rank: whose input.
        shape, dtype: of the array.

    Returns:
        The array, the same for (seed, rank) on every rank.
    """
    rng = np.random.default_rng([seed, rank])
    dtype = np.dtype(dtype)
    low = 0 if dtype.kind == "u" else -7
    return rng.integers(low, 8, size=tuple(shape)).astype(dtype)


_REDUCE = {"Sum": lambda xs: np.sum(xs, axis=0),
           "Average": lambda xs: np.sum(xs, axis=0) / len(xs),
           "Min": lambda xs: np.min(xs, axis=0),
           "Max": lambda xs: np.max(xs, axis=0),
           "Product": lambda xs: np.prod(xs, axis=0)}


def _allreduce_case(rank: int, size: int, seed: int, dtype: Any, op: str,
                    shape: Sequence[int] = (6, 5), prescale: float = 1.0,
                    postscale: float = 1.0, label: str = "") -> Case:
    every = [rank_data(seed, r, shape, dtype) for r in range(size)]
    want = _REDUCE[op]([x.astype(np.float64) * prescale for x in every])
    want = (want * postscale).astype(np.dtype(dtype))

    def call(api: Any, xs: List[Any], name: str) -> List[Any]:
        return [api.allreduce(xs[0], op=getattr(api, op), name=name,
                              prescale_factor=prescale,
                              postscale_factor=postscale)]
    name = label or "allreduce %s %s" % (np.dtype(dtype).name, op)
    kind = np.dtype(dtype)
    rtol = 1e-3 if kind == np.float16 else 1e-6 if kind.kind == "f" else 0.0
    return Case(name, [every[rank]], call, [want], rtol)


def collective_cases(rank: int, size: int, large_elements: int) -> List[Case]:
    """Every collective, on this rank's data, with numpy's answers.

    Args:
        rank, size: this rank and the job's size.
        large_elements: float32 elements of the one large allreduce.

    Returns:
        The cases, the same list (names, shapes, order) on every rank.
    """
    cases = [_allreduce_case(rank, size, 10 + i, dt, "Sum")
             for i, dt in enumerate([np.float32, np.float16, np.float64,
                                     np.int32, np.int64, np.uint8])]
    cases += [_allreduce_case(rank, size, 20 + i, np.float32, op)
              for i, op in enumerate(["Average", "Min", "Max", "Product"])]
    cases.append(_allreduce_case(rank, size, 25, np.float16, "Average"))
    cases.append(_allreduce_case(
        rank, size, 26, np.float32, "Sum", prescale=0.5, postscale=3.0,
        label="allreduce float32 Sum x0.5 then x3"))
    cases.append(_allreduce_case(
        rank, size, 27, np.float32, "Sum", shape=(large_elements,),
        label="allreduce float32 Sum %.3g MiB" % (large_elements * 4 / 2**20)))

    shapes = [(7,), (3, 4), (2, 2, 2)]
    group = [[rank_data(30 + k, r, s, np.float32) for r in range(size)]
             for k, s in enumerate(shapes)]
    cases.append(Case(
        "grouped_allreduce 3 x float32 Average", [g[rank] for g in group],
        lambda api, xs, name: list(api.grouped_allreduce(
            xs, op=api.Average, name=name)),
        [_REDUCE["Average"](g).astype(np.float32) for g in group], 1e-6))

    for seed, dt in ((40, np.float32), (41, np.int64)):
        rows = [rank_data(seed, r, (r + 1, 3), dt) for r in range(size)]
        cases.append(Case(
            "allgather %s, rank r gives r+1 rows" % np.dtype(dt).name,
            [rows[rank]],
            lambda api, xs, name: [api.allgather(xs[0], name=name)],
            [np.concatenate(rows)]))

    root = size - 1
    data = [rank_data(42, r, (4, 5), np.float32) for r in range(size)]
    cases.append(Case(
        "broadcast float32 from rank %d" % root, [data[rank]],
        lambda api, xs, name: [api.broadcast(xs[0], root_rank=root,
                                             name=name)],
        [data[root]]))

    # Rank s sends (s + k) % 3 + 1 rows to rank k.
    splits = [[(s + k) % 3 + 1 for k in range(size)] for s in range(size)]
    sent = [rank_data(43, s, (sum(splits[s]), 2), np.float32)
            for s in range(size)]
    received = [np.split(sent[s], np.cumsum(splits[s])[:-1])[rank]
                for s in range(size)]
    cases.append(Case(
        "alltoall float32, uneven splits", [sent[rank]],
        lambda api, xs, name: [api.alltoall(xs[0], splits=splits[rank],
                                            name=name)[0]],
        [np.concatenate(received)]))

    n = 2 * size + 1
    data = [rank_data(44, r, (n, 3), np.float32) for r in range(size)]
    total = np.sum(data, axis=0)
    begin = rank * (n // size) + min(rank, n % size)
    rows = n // size + (1 if rank < n % size else 0)
    cases.append(Case(
        "reducescatter float32 Sum, %d rows" % n, [data[rank]],
        lambda api, xs, name: [api.reducescatter(xs[0], op=api.Sum,
                                                 name=name)],
        [total[begin:begin + rows].astype(np.float32)]))
    return cases


def tensor_name(prefix: str, case_name: str) -> str:
    """A collective's name: ``prefix/`` and the case name with every
    character TF does not allow in op names made ``_``."""
    return prefix + "/" + re.sub(r"[^A-Za-z0-9_.]", "_", case_name)


def check_case(case: Case, outputs: Sequence[Any],
               to_numpy: Callable[[Any], np.ndarray]) -> str:
    """Compares a case's outputs with numpy's; returns the comparison.

    Raises:
        CheckFailed: a count, shape, dtype or value differs.
    """
    if len(outputs) != len(case.expected):
        raise CheckFailed("%d outputs, want %d" % (len(outputs),
                                                   len(case.expected)))
    details = [compare(to_numpy(o), w, case.rtol, "output %d" % i
                       if len(outputs) > 1 else "")
               for i, (o, w) in enumerate(zip(outputs, case.expected))]
    return "; ".join(details)


@dataclasses.dataclass
class Context:
    """What every section of a rank needs."""
    report: Report
    rank: int
    size: int
    quick: bool
    tf_on_cpu: bool
    cuda: Optional[CudaRuntime] = None  # None: no GPU support or no GPU
    device: int = -1
    bus_id: str = ""
    no_gpu: str = ""  # why there is no GPU path, when there is none
    # The ranks that share a GPU (hbcore then refuses the job's NCCL
    # communicator on every rank), or [].
    sharing: List[int] = dataclasses.field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Some ranks of the job share a GPU."""
        return bool(self.sharing)

    @property
    def large_elements(self) -> int:
        """Elements of the large allreduce case (32 MiB, quick: 1 MiB)."""
        return (1 << 18) if self.quick else (8 << 20)


def shared_gpu_group(table: Sequence[Sequence[str]]) -> List[int]:
    """The ranks that share the first shared GPU, as hbcore's refusal
    names them.

    Args:
        table: rank -> (host, PCI bus id).

    Returns:
        Those ranks in order, or [] when every rank has a GPU of its own.
    """
    for i, mine in enumerate(table):
        group = [j for j in range(i, len(table)) if tuple(table[j]) ==
                 tuple(mine)]
        if len(group) > 1:
            return group
    return []


def ranks_text(ranks: Sequence[int]) -> str:
    """``ranks 0 and 1`` / ``ranks 0, 1 and 2``, as hbcore writes them."""
    names = [str(r) for r in ranks]
    return "ranks " + (", ".join(names[:-1]) + " and " + names[-1]
                       if len(names) > 1 else names[0])


def set_up_gpu(ctx: Context) -> None:
    """Finds this rank's GPU (``ctx.cuda``, ``device``, ``bus_id``, or
    ``no_gpu`` saying why there is none), records the libraries and
    devices, and sets ``ctx.sharing`` (the same on every rank: one
    allgather).

    Args:
        ctx: this rank's context, filled in.
    """
    info = hb.gpu_info()
    devices = int(info.get("cuda_devices", "0") or 0)
    if not hb.nccl_built():
        ctx.no_gpu = "hbcore has no GPU support here: %s" % info.get(
            "error", "unknown reason")
    elif devices == 0:
        ctx.no_gpu = "the CUDA runtime sees no GPU (%s)" % info.get(
            "cuda_runtime_library")
    else:
        ctx.cuda = CudaRuntime(info["cuda_runtime_library"])
        ctx.device = hb.local_rank() % devices
        ctx.cuda.set_device(ctx.device)
        ctx.bus_id = ctx.cuda.bus_id(ctx.device)
    # Where two ranks share a GPU, the job's NCCL communicator is refused
    # on every rank, those two or not.
    table = hb.allgather_object((socket.gethostname(), ctx.bus_id))
    ctx.sharing = [] if ctx.cuda is None else shared_gpu_group(table)
    ctx.report.info(rank=ctx.rank, host=socket.gethostname(),
                    device=ctx.device, bus_id=ctx.bus_id,
                    nccl=info.get("nccl_version"),
                    nccl_library=info.get("nccl_library"),
                    cuda_runtime=info.get("cuda_runtime_version"),
                    cuda_runtime_library=info.get("cuda_runtime_library"),
                    cuda_devices=devices, no_gpu=ctx.no_gpu,
                    sharing=ctx.sharing)


def gpu_label(ctx: Context) -> str:
    """The device column of this rank's GPU rows."""
    return "GPU %d" % ctx.device if ctx.cuda else "-"


def numpy_api_section(ctx: Context) -> None:
    """Every collective through hbcore's numpy API on hbcore.GpuArray
    device memory (the NCCL backend), or, where ranks share a GPU, the
    refusal; NOT RUN rows where there is no GPU path."""
    section = "numpy API, GPU memory"
    cases = collective_cases(ctx.rank, ctx.size, ctx.large_elements)
    if ctx.cuda is None or ctx.shared:
        why = ctx.no_gpu or "%s share one GPU: see the refusal check" % (
            ranks_text(ctx.sharing))
        for case in cases:
            ctx.report.add(section, case.name, gpu_label(ctx),
                           NA if ctx.shared else NOT_RUN, why)
        if ctx.shared:
            refusal_check(ctx)
        return
    cuda, device = ctx.cuda, ctx.device

    def to_numpy(out: Any) -> np.ndarray:
        if not isinstance(out, hb.GpuArray) or out.device != device:
            raise CheckFailed("result is %r, not an hbcore.GpuArray on GPU "
                              "%d" % (out, device))
        return cuda.download(out)

    for case in cases:
        def run(case: Case = case) -> str:
            xs = [cuda.upload(x, device) for x in case.inputs]
            outputs = case.call(hb, xs, tensor_name("gpu_check/np",
                                                    case.name))
            return check_case(case, outputs, to_numpy)
        ctx.report.run(section, case.name, gpu_label(ctx), run)

    def in_place() -> str:
        every = [rank_data(50, r, (33,), np.float32) for r in range(ctx.size)]
        x = cuda.upload(every[ctx.rank], device)
        out = hb.allreduce_(x, op=hb.Sum, name="gpu_check/np/in-place")
        if out is not x:
            raise CheckFailed("allreduce_ returned another object")
        return compare(cuda.download(x), np.sum(every, axis=0), 0.0)
    ctx.report.run(section, "allreduce_ float32 Sum in place",
                   gpu_label(ctx), in_place)


def refusal_check(ctx: Context) -> None:
    """Ranks on one GPU: a GPU collective fails on every rank with
    hbcore's UnsupportedError naming the ranks and the GPU, within
    seconds; CPU collectives keep working."""
    section = "two ranks on one GPU"
    cuda, device = ctx.cuda, ctx.device
    assert cuda is not None

    def refused() -> str:
        x = cuda.upload(np.ones(4, np.float32), device)
        start = time.monotonic()
        try:
            hb.allreduce(x, op=hb.Sum, name="gpu_check/shared")
        except UnsupportedError as exc:
            elapsed = time.monotonic() - start
            text = str(exc)
            want = [ranks_text(ctx.sharing) + " are on the same GPU",
                    "PCI bus id " + ctx.bus_id, SHARED_GPU_TEXT]
            missing = [w for w in want if w not in text]
            if missing:
                raise CheckFailed("UnsupportedError lacks %r: %s" % (
                    missing, text))
            return "UnsupportedError after %.2f s: %s" % (elapsed, text)
        raise CheckFailed("a GPU allreduce of ranks on one GPU succeeded")
    ctx.report.run(section, "GPU allreduce refused, naming the cause",
                   gpu_label(ctx), refused)

    def cpu_after() -> str:
        every = [rank_data(51, r, (9,), np.float32) for r in range(ctx.size)]
        out = hb.allreduce(every[ctx.rank], op=hb.Sum,
                           name="gpu_check/shared/cpu")
        return compare(out, np.sum(every, axis=0), 0.0)
    ctx.report.run(section, "CPU allreduce after the refusal", "CPU",
                   cpu_after)


def bandwidth_section(ctx: Context) -> None:
    """Times in-place float32 Sum allreduces of the same sizes through the
    NCCL path (device memory) and the host path (numpy); rank 0 records
    one row per size."""
    from mpi4py import MPI
    from nccl import reps_for  # the GPU benchmark's repetition counts
    comm = MPI.COMM_WORLD
    sizes = [1 << 16, 1 << 20] if ctx.quick else [1 << 20, 16 << 20,
                                                 64 << 20, 256 << 20]
    factor = 2.0 * (ctx.size - 1) / ctx.size if ctx.size > 1 else 1.0
    gpu = ctx.cuda is not None and not ctx.shared
    for nbytes in sizes:
        count = nbytes // 4
        host = np.zeros(count, np.float32)
        fns = [lambda host=host, n=nbytes: hb.allreduce_(
            host, op=hb.Sum, name="gpu_check/bw/host/%d" % n)]
        if gpu:
            dev = ctx.cuda.upload(host, ctx.device)
            fns.append(lambda dev=dev, n=nbytes: hb.allreduce_(
                dev, op=hb.Sum, name="gpu_check/bw/nccl/%d" % n))
        times = measure(comm, fns, **reps_for(nbytes, ctx.quick))
        if ctx.rank == 0:
            row = {"np": ctx.size, "bytes": nbytes, "host_s": times[0],
                   "host_busbw_GBps": nbytes * factor / times[0] / 1e9}
            if gpu:
                row.update(nccl_s=times[1],
                           nccl_busbw_GBps=nbytes * factor / times[1] / 1e9)
            else:
                row["nccl_why"] = ctx.no_gpu or (
                    "refused: %s share one GPU" % ranks_text(ctx.sharing))
            ctx.report.bandwidth(**row)


def main(argv: Optional[List[str]] = None) -> int:
    """Runs every section on this rank; returns 0 (the verdict is the
    driver's, from the rows)."""
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tf-on-cpu", action="store_true")
    parser.add_argument("--no-tf", action="store_true")
    args = parser.parse_args(argv)
    hb.init()
    ctx = Context(Report(args.out, hb.rank()), hb.rank(), hb.size(),
                  args.quick, args.tf_on_cpu)
    set_up_gpu(ctx)
    numpy_api_section(ctx)
    if args.no_tf:
        ctx.report.add("TensorFlow", "every TensorFlow check", "-", NOT_RUN,
                       "--no-tf")
    else:
        import _gpu_check_tf
        _gpu_check_tf.tensorflow_sections(ctx)
    bandwidth_section(ctx)
    hb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
