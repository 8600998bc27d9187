"""One rank of the fake NCCL's own multi-process tests
(tests/test_fake_gpu.py):

    python -m fake_gpu.selftest_rank SCENARIO RANK NRANKS UID_HEX

Runs the scenario, checks its results against numpy, prints one line
``RESULT <json>`` (with "passed": the named calls and comparisons that
held) and exits 0; any failed check makes it print every failure
to stderr and exit 1.
"""
import itertools
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .fake_array import FakeGpuArray, fake_cuda
from .nccl_ctypes import (NCCL_AVG, NCCL_FLOAT32, NCCL_INVALID_USAGE,
                          NCCL_MAX, NCCL_MIN, NCCL_PROD, NCCL_SCALAR_DEVICE,
                          NCCL_SCALAR_HOST_IMMEDIATE, NCCL_SUCCESS, NCCL_SUM,
                          NCCL_SYSTEM_ERROR, FakeNccl, nccl_dtype, shm_files)

PREMULSUM_HOST = "premulsum_host"
PREMULSUM_DEVICE = "premulsum_device"
OPS = {"sum": NCCL_SUM, "prod": NCCL_PROD, "max": NCCL_MAX,
       "min": NCCL_MIN, "avg": NCCL_AVG}


def _dtypes() -> List[np.dtype]:
    names = ["int8", "uint8", "int32", "uint32", "int64", "uint64",
             "float16", "float32", "float64"]
    out = [np.dtype(n) for n in names]
    try:
        import ml_dtypes
        out.append(np.dtype(ml_dtypes.bfloat16))
    except ImportError:
        pass
    return out


class Rank:
    """What a scenario works with, plus a failure collector."""

    def __init__(self, rank: int, nranks: int, uid: bytes) -> None:
        self.rank = rank
        self.nranks = nranks
        self.uid = uid
        self.cuda = fake_cuda()
        self.nccl = FakeNccl()
        self.stream = self.cuda.stream_create()
        self.failures: List[str] = []
        # The calls and comparisons that held, by name, in order
        # (check_rc, check_equal): RESULT carries them as "passed", so a
        # test asserts on the rank's verdict by name.
        self.passed: List[str] = []

    def check(self, ok: bool, what: str) -> None:
        """Records `what` (a failure's description) unless `ok`."""
        if not ok:
            self.failures.append(what)

    def check_equal(self, what: str, got: np.ndarray,
                    want: np.ndarray) -> None:
        """Records a failure unless the arrays are equal (and alike)."""
        if got.shape != want.shape or got.dtype != want.dtype or \
                not np.array_equal(got, want):
            self.failures.append("%s:\n got  %r\n want %r" % (what, got, want))
        else:
            self.passed.append(what)

    def check_rc(self, what: str, rc: int, want: int = NCCL_SUCCESS) -> None:
        """Records a failure unless a call returned `want`."""
        if rc != want:
            self.failures.append("%s returned %d, want %d" % (what, rc, want))
        else:
            self.passed.append(what)

    def dev(self, array: np.ndarray) -> FakeGpuArray:
        """A device copy of `array`, on this rank's stream."""
        return FakeGpuArray(array, stream=self.stream, cuda=self.cuda)

    def empty(self, count: int, dtype: np.dtype) -> FakeGpuArray:
        """An uninitialized device vector, on this rank's stream."""
        return FakeGpuArray.empty((count,), dtype, stream=self.stream,
                                  cuda=self.cuda)

    def init(self) -> int:
        """This rank's communicator."""
        return self.nccl.comm_init_rank(self.nranks, self.uid, self.rank)


# ---- reference results ----

def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype.itemsize == 2 and \
        dtype.kind != "i" and dtype.kind != "u" else dtype


def _trunc_div(values: np.ndarray, n: int, dtype: np.dtype) -> np.ndarray:
    out = [(-((-int(v)) // n) if int(v) < 0 else int(v) // n)
           for v in values]
    return np.array(out, dtype=object).astype(dtype)


def reference(op: str, dtype: np.dtype, inputs: Sequence[np.ndarray],
              scalars: Sequence[Any]) -> np.ndarray:
    """What the fake must compute: a fold over ranks in rank order in the
    compute type (float for half types), rounded once."""
    cdt = _compute_dtype(dtype)
    xs = [x.astype(cdt) for x in inputs]
    with np.errstate(over="ignore"):
        if op in ("sum", "avg"):
            acc = xs[0]
            for x in xs[1:]:
                acc = (acc + x).astype(cdt)
        elif op == "prod":
            acc = xs[0]
            for x in xs[1:]:
                acc = (acc * x).astype(cdt)
        elif op == "max":
            acc = np.maximum.reduce(xs)
        elif op == "min":
            acc = np.minimum.reduce(xs)
        else:  # premulsum: each rank's scalar, of the op's dtype
            s = [np.array(v, dtype=dtype).astype(cdt) for v in scalars]
            acc = (s[0] * xs[0]).astype(cdt)
            for sr, x in zip(s[1:], xs[1:]):
                acc = (acc + (sr * x).astype(cdt)).astype(cdt)
        if op == "avg":
            if cdt.kind in "iu":
                return _trunc_div(acc, len(xs), dtype)
            acc = (acc / np.array(len(xs), dtype=cdt)).astype(cdt)
    return acc.astype(dtype)


def rank_input(op: str, dtype: np.dtype, rank: int, case: int,
               count: int) -> np.ndarray:
    """Deterministic data of one rank for one case (any rank can compute
    every rank's)."""
    rng = np.random.default_rng(7919 * case + rank)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if op in ("prod", PREMULSUM_HOST, PREMULSUM_DEVICE):
            low, high = (0 if dtype.kind == "u" else -4), 5
        else:  # wide: sums wrap around
            low, high = info.min // 2, info.max // 2
        return rng.integers(low, high, size=count, endpoint=True,
                            dtype=np.int64 if dtype.kind == "i"
                            else np.uint64).astype(dtype)
    if op == "prod":
        values = rng.uniform(0.5, 1.5, size=count)
    else:
        values = rng.uniform(-4.0, 4.0, size=count)
    return values.astype(np.float64).astype(np.float32).astype(dtype) \
        if dtype.itemsize == 2 else values.astype(dtype)


def rank_scalar(dtype: np.dtype, rank: int) -> Any:
    """The PreMulSum scalar of a rank (different on each, as NCCL allows)."""
    if dtype.kind in "iu":
        return rank + 2
    return 0.1 * (rank + 1)


# ---- scenarios ----

def _allreduce_case(ctx: Rank, comm: int, op: str, dtype: np.dtype,
                    case: int, count: int, in_place: bool) -> None:
    inputs = [rank_input(op, dtype, r, case, count)
              for r in range(ctx.nranks)]
    scalars = [rank_scalar(dtype, r) for r in range(ctx.nranks)]
    nd = nccl_dtype(dtype)
    send = ctx.dev(inputs[ctx.rank])
    recv = send if in_place else ctx.empty(count, dtype)
    scalar_dev = None
    if op in OPS:
        redop = OPS[op]
    elif op == PREMULSUM_HOST:
        rc, redop = ctx.nccl.premulsum(
            np.array(scalars[ctx.rank], dtype=dtype),
            nd, NCCL_SCALAR_HOST_IMMEDIATE, comm)
        ctx.check_rc("premulsum create", rc)
    else:
        scalar_dev = ctx.dev(np.array([scalars[ctx.rank]], dtype=dtype))
        rc, redop = ctx.nccl.premulsum(scalar_dev.ptr, nd,
                                       NCCL_SCALAR_DEVICE, comm)
        ctx.check_rc("premulsum create", rc)
    rc = ctx.nccl.all_reduce(send.ptr, recv.ptr, count, nd, redop, comm,
                             ctx.stream)
    what = "allreduce %s %s count=%d%s" % (op, dtype, count,
                                           " in-place" if in_place else "")
    ctx.check_rc(what, rc)
    if redop >= 5:
        # NCCL allows destroying the op as soon as the call returned.
        ctx.check_rc("redop destroy", ctx.nccl.redop_destroy(redop, comm))
    ctx.check_equal(what, recv.numpy(),
                    reference(op, dtype, inputs, scalars))


def _device_scalar_read_at_run_time(ctx: Rank, comm: int) -> None:
    """A device-resident PreMulSum scalar is read when the collective runs:
    a copy of a new value enqueued before it (behind a sleep) is seen."""
    dtype = np.dtype(np.float32)
    scalar = ctx.dev(np.array([100.0], dtype=dtype))
    rc, redop = ctx.nccl.premulsum(scalar.ptr, NCCL_FLOAT32,
                                   NCCL_SCALAR_DEVICE, comm)
    ctx.check_rc("premulsum create", rc)
    x = ctx.dev(np.full(4, ctx.rank + 1, dtype=dtype))
    ctx.cuda.stream_synchronize(ctx.stream)
    ctx.cuda.sleep_on_stream(ctx.stream, 100)
    ctx.cuda.memcpy_htod(scalar.ptr, np.array([2.0], dtype=dtype),
                         ctx.stream)
    ctx.check_rc("allreduce", ctx.nccl.all_reduce(
        x.ptr, x.ptr, 4, NCCL_FLOAT32, redop, comm, ctx.stream))
    want = np.full(4, 2.0 * sum(range(1, ctx.nranks + 1)), dtype=dtype)
    ctx.check_equal("device scalar read at run time", x.numpy(), want)
    ctx.nccl.redop_destroy(redop, comm)


def _gather_scatter_bcast(ctx: Rank, comm: int) -> None:
    n, me, s = ctx.nranks, ctx.rank, ctx.stream
    nccl = ctx.nccl
    # AllGather, out of place and in place (send = recv + rank block).
    for dtype in (np.dtype(np.float32), np.dtype(np.int8)):
        nd = nccl_dtype(dtype)
        blocks = [(np.arange(7) + 10 * r).astype(dtype) for r in range(n)]
        send = ctx.dev(blocks[me])
        recv = ctx.empty(7 * n, dtype)
        ctx.check_rc("allgather", nccl.all_gather(send.ptr, recv.ptr, 7, nd,
                                                  comm, s))
        ctx.check_equal("allgather %s" % dtype, recv.numpy(),
                        np.concatenate(blocks))
        full = np.zeros(7 * n, dtype)
        full[7 * me:7 * (me + 1)] = blocks[me]
        inplace = ctx.dev(full)
        ctx.check_rc("allgather in place", nccl.all_gather(
            inplace.ptr + 7 * me * dtype.itemsize, inplace.ptr, 7, nd, comm,
            s))
        ctx.check_equal("allgather in place %s" % dtype, inplace.numpy(),
                        np.concatenate(blocks))
    # ReduceScatter: rank r gets block r; out of place and in place.
    for op, dtype in (("sum", np.dtype(np.float32)),
                      ("avg", np.dtype(np.int32)),
                      ("max", np.dtype(np.float16))):
        nd = nccl_dtype(dtype)
        inputs = [rank_input(op, dtype, r, 500, 5 * n) for r in range(n)]
        want = reference(op, dtype, inputs, [])[5 * me:5 * (me + 1)]
        send = ctx.dev(inputs[me])
        recv = ctx.empty(5, dtype)
        ctx.check_rc("reducescatter", nccl.reduce_scatter(
            send.ptr, recv.ptr, 5, nd, OPS[op], comm, s))
        ctx.check_equal("reducescatter %s %s" % (op, dtype), recv.numpy(),
                        want)
        inplace = ctx.dev(inputs[me])
        ctx.check_rc("reducescatter in place", nccl.reduce_scatter(
            inplace.ptr, inplace.ptr + 5 * me * dtype.itemsize, 5, nd,
            OPS[op], comm, s))
        ctx.check_equal("reducescatter in place %s %s" % (op, dtype),
                        inplace.numpy()[5 * me:5 * (me + 1)], want)
    # Broadcast from every root; send is only read on the root (NULL
    # elsewhere), then in place.
    for root in range(n):
        data = (np.arange(9) * (root + 1)).astype(np.float64)
        send = ctx.dev(data) if me == root else None
        recv = ctx.empty(9, data.dtype)
        ctx.check_rc("broadcast", nccl.broadcast(
            send.ptr if send else 0, recv.ptr, 9, nccl_dtype(data.dtype),
            root, comm, s))
        ctx.check_equal("broadcast root %d" % root, recv.numpy(), data)
        buf = ctx.dev(data if me == root else np.zeros(9))
        ctx.check_rc("broadcast in place", nccl.broadcast(
            buf.ptr, buf.ptr, 9, nccl_dtype(data.dtype), root, comm, s))
        ctx.check_equal("broadcast in place root %d" % root, buf.numpy(),
                        data)
    # Reduce to the last rank; recv is only written there (NULL elsewhere).
    root = n - 1
    inputs = [rank_input("sum", np.dtype(np.float32), r, 600, 11)
              for r in range(n)]
    send = ctx.dev(inputs[me])
    recv = ctx.empty(11, np.float32) if me == root else None
    ctx.check_rc("reduce", nccl.reduce(send.ptr, recv.ptr if recv else 0,
                                       11, NCCL_FLOAT32, NCCL_SUM, root, comm,
                                       s))
    if recv is not None:
        ctx.check_equal("reduce", recv.numpy(),
                        reference("sum", np.dtype(np.float32), inputs, []))
    ctx.cuda.stream_synchronize(s)


def _alltoall_counts(n: int) -> List[List[int]]:
    """counts[i][j]: elements rank i sends to rank j (some zero)."""
    return [[(3 * i + 2 * j + 1) % 4 for j in range(n)] for i in range(n)]


def alltoall_block(i: int, j: int, count: int) -> np.ndarray:
    """What rank i sends to rank j in the alltoall."""
    return (1000 * i + 100 * j + np.arange(count)).astype(np.float32)


def _group_alltoall(ctx: Rank, comm: int, recvs_first: bool) -> None:
    """An uneven alltoall as one group of sends and receives (self
    included)."""
    n, me, nccl = ctx.nranks, ctx.rank, ctx.nccl
    counts = _alltoall_counts(n)
    send = ctx.dev(np.concatenate(
        [alltoall_block(me, j, counts[me][j]) for j in range(n)]))
    want = np.concatenate([alltoall_block(i, me, counts[i][me])
                           for i in range(n)])
    recv = ctx.empty(len(want), np.float32)
    ctx.check_rc("group start", nccl.group_start())
    for phase in ((1, 0) if recvs_first else (0, 1)):
        offset = 0
        for peer in range(n):
            if phase == 0:
                c = counts[me][peer]
                ctx.check_rc("send", nccl.send(send.ptr + 4 * offset, c,
                                               NCCL_FLOAT32, peer, comm,
                                               ctx.stream))
            else:
                c = counts[peer][me]
                ctx.check_rc("recv", nccl.recv(recv.ptr + 4 * offset, c,
                                               NCCL_FLOAT32, peer, comm,
                                               ctx.stream))
            offset += c
    ctx.check_rc("group end", nccl.group_end())
    ctx.check_equal("alltoall (recvs first: %s)" % recvs_first, recv.numpy(),
                    want)


def _group_bcast_allgather(ctx: Rank, comm: int) -> None:
    """An uneven allgather as a group of broadcasts, in place."""
    n, me, nccl = ctx.nranks, ctx.rank, ctx.nccl
    counts = [2, 0, 3, 1][:n]
    offsets = [0] + list(itertools.accumulate(counts))
    parts = [(10 * r + np.arange(counts[r])).astype(np.int32)
             for r in range(n)]
    buf = np.full(offsets[-1], -1, np.int32)
    buf[offsets[me]:offsets[me + 1]] = parts[me]
    recv = ctx.dev(buf)
    ctx.check_rc("group start", nccl.group_start())
    for root in range(n):
        ptr = recv.ptr + 4 * offsets[root]
        ctx.check_rc("broadcast", nccl.broadcast(
            ptr if root == me else 0, ptr, counts[root], nccl_dtype(np.int32),
            root, comm, ctx.stream))
    ctx.check_rc("group end", nccl.group_end())
    ctx.check_equal("uneven allgather by broadcasts", recv.numpy(),
                    np.concatenate(parts))


def _group_reduce_scatter(ctx: Rank, comm: int) -> None:
    """An uneven reducescatter as a group of reduces (one per root)."""
    n, me, nccl = ctx.nranks, ctx.rank, ctx.nccl
    counts = [3, 1, 0, 2][:n]
    offsets = [0] + list(itertools.accumulate(counts))
    dtype = np.dtype(np.float32)
    inputs = [rank_input("sum", dtype, r, 700, offsets[-1])
              for r in range(n)]
    send = ctx.dev(inputs[me])
    recv = ctx.empty(counts[me], dtype)
    ctx.check_rc("group start", nccl.group_start())
    for root in range(n):
        ctx.check_rc("reduce", nccl.reduce(
            send.ptr + 4 * offsets[root], recv.ptr if root == me else 0,
            counts[root], NCCL_FLOAT32, NCCL_SUM, root, comm, ctx.stream))
    ctx.check_rc("group end", nccl.group_end())
    want = reference("sum", dtype, inputs, [])[offsets[me]:offsets[me + 1]]
    ctx.check_equal("uneven reducescatter by reduces", recv.numpy(), want)


def scenario_collectives(ctx: Rank) -> Dict[str, Any]:
    """Every collective against numpy."""
    comm = ctx.init()
    case = 0
    ops = list(OPS) + [PREMULSUM_HOST, PREMULSUM_DEVICE]
    for dtype in _dtypes():
        for op in ops:
            case += 1
            _allreduce_case(ctx, comm, op, dtype, case, 37, case % 2 == 0)
    # Crossing the reduction's chunk size, in place and not.
    for dtype in (np.dtype(np.float32), np.dtype(np.float16)):
        for in_place in (False, True):
            case += 1
            _allreduce_case(ctx, comm, "sum", dtype, case, 5000, in_place)
    _device_scalar_read_at_run_time(ctx, comm)
    _gather_scatter_bcast(ctx, comm)
    _group_alltoall(ctx, comm, recvs_first=False)
    _group_alltoall(ctx, comm, recvs_first=True)
    _group_bcast_allgather(ctx, comm)
    _group_reduce_scatter(ctx, comm)
    ctx.check_rc("async error", ctx.nccl.async_error(comm)[1])
    ctx.check_rc("destroy", ctx.nccl.comm_destroy(comm))
    return {"cases": case}


def scenario_basic(ctx: Rank) -> Dict[str, Any]:
    """Init, one allreduce, destroy."""
    comm = ctx.init()
    x = ctx.dev(np.full(3, ctx.rank + 1.0, np.float32))
    ctx.check_rc("allreduce", ctx.nccl.all_reduce(
        x.ptr, x.ptr, 3, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream))
    total = ctx.nranks * (ctx.nranks + 1) / 2
    ctx.check_equal("allreduce", x.numpy(), np.full(3, total, np.float32))
    ctx.check_rc("destroy", ctx.nccl.comm_destroy(comm))
    return {}


def scenario_large(ctx: Rank) -> Dict[str, Any]:
    """A 64 MB float32 allreduce, timed from the call to the stream's end."""
    count = 16 << 20
    x = ctx.dev(np.full(count, ctx.rank + 1.0, np.float32))
    comm = ctx.init()
    ctx.cuda.stream_synchronize(ctx.stream)
    start = time.monotonic()
    ctx.check_rc("allreduce", ctx.nccl.all_reduce(
        x.ptr, x.ptr, count, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream))
    ctx.cuda.stream_synchronize(ctx.stream)
    seconds = time.monotonic() - start
    got = x.numpy()
    total = ctx.nranks * (ctx.nranks + 1) / 2
    ctx.check_equal("64 MB allreduce result", got,
                    np.full(count, total, np.float32))
    ctx.check_rc("destroy", ctx.nccl.comm_destroy(comm))
    return {"seconds": seconds}


def _wait_for_peer_forever(ctx: Rank, comm: int) -> FakeGpuArray:
    """Rank 0 enqueues an allreduce that its peer never joins."""
    x = ctx.dev(np.ones(1000, np.float32))
    ctx.check_rc("allreduce", ctx.nccl.all_reduce(
        x.ptr, x.ptr, 1000, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream))
    time.sleep(0.4)
    ctx.check(not ctx.cuda.stream_query(ctx.stream),
              "the allreduce completed without its peer")
    return x


def _segment_appears(ctx: Rank, suffix: str, timeout: float = 10) -> bool:
    """Polls the shm directory for this communicator's file ``*suffix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(f.endswith(suffix) for f in shm_files(ctx.uid)):
            return True
        time.sleep(0.01)
    return False


def _abort_and_check(ctx: Rank, comm: int) -> float:
    start = time.monotonic()
    ctx.check_rc("abort", ctx.nccl.comm_abort(comm))
    ctx.cuda.stream_synchronize(ctx.stream)
    seconds = time.monotonic() - start
    ctx.check(seconds < 5, "the stream took %.1f s after abort" % seconds)
    # Later calls on the aborted comm fail cleanly.
    ctx.check_rc("async error after abort", ctx.nccl.async_error(comm)[0],
                 NCCL_INVALID_USAGE)
    ctx.check_rc("destroy after abort", ctx.nccl.comm_destroy(comm),
                 NCCL_INVALID_USAGE)
    # The stream still works.
    y = ctx.dev(np.arange(5, dtype=np.int64))
    ctx.check_equal("stream after abort", y.numpy(),
                    np.arange(5, dtype=np.int64))
    return seconds


def scenario_abort(ctx: Rank) -> Dict[str, Any]:
    """Rank 0's allreduce waits for rank 1, which never joins; abort
    unblocks it and removes the files."""
    comm = ctx.init()
    if ctx.rank != 0:
        ctx.check_rc("destroy", ctx.nccl.comm_destroy(comm))
        return {}
    _wait_for_peer_forever(ctx, comm)
    ctx.check_rc("async error while waiting", ctx.nccl.async_error(comm)[1])
    ctx.check(_segment_appears(ctx, "o0-c0"),
              "rank 0's segment is not in the shm directory")
    seconds = _abort_and_check(ctx, comm)
    ctx.check(shm_files(ctx.uid) == [], "files left after abort: %s"
              % shm_files(ctx.uid))
    return {"abort_seconds": seconds}


def _exchange_group(ctx: Rank, comm: int) -> None:
    """Each rank sends its rank number to the other (2 ranks)."""
    peer = 1 - ctx.rank
    send = ctx.dev(np.full(4, ctx.rank, np.int32))
    recv = ctx.empty(4, np.int32)
    ctx.nccl.group_start()
    ctx.nccl.send(send.ptr, 4, nccl_dtype(np.int32), peer, comm, ctx.stream)
    ctx.nccl.recv(recv.ptr, 4, nccl_dtype(np.int32), peer, comm, ctx.stream)
    ctx.check_rc("group end", ctx.nccl.group_end())
    ctx.check_equal("exchange", recv.numpy(), np.full(4, peer, np.int32))


def scenario_inject_sync(ctx: Rank) -> Dict[str, Any]:
    """FAKE_NCCL_FAIL_RANK=1 FAKE_NCCL_FAIL_AT=2 FAKE_NCCL_FAIL_MODE=sync."""
    comm = ctx.init()
    x = ctx.dev(np.ones(8, np.float32))
    ctx.check_rc("call 1", ctx.nccl.all_reduce(
        x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream))
    ctx.check_equal("call 1", x.numpy(), np.full(8, 2.0, np.float32))
    rc = ctx.nccl.all_reduce(x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm,
                             ctx.stream)
    if ctx.rank == 1:
        ctx.check_rc("call 2 on the failing rank", rc, NCCL_SYSTEM_ERROR)
        ctx.check(ctx.cuda.stream_query(ctx.stream),
                  "the failed call enqueued work")
        ctx.check_rc("async error", ctx.nccl.async_error(comm)[1])
        ctx.check_rc("abort", ctx.nccl.comm_abort(comm))
        return {}
    ctx.check_rc("call 2 on the healthy rank", rc)
    time.sleep(0.4)
    ctx.check(not ctx.cuda.stream_query(ctx.stream),
              "call 2 completed without the failing rank")
    _abort_and_check(ctx, comm)
    return {}


def scenario_inject_async(ctx: Rank) -> Dict[str, Any]:
    """FAKE_NCCL_FAIL_RANK=1 FAKE_NCCL_FAIL_AT=2 FAKE_NCCL_FAIL_MODE=async;
    call 1 is a group of two operations (it counts once)."""
    comm = ctx.init()
    _exchange_group(ctx, comm)
    ctx.check_rc("async error after call 1", ctx.nccl.async_error(comm)[1])
    x = ctx.dev(np.ones(8, np.float32))
    ctx.check_rc("call 2", ctx.nccl.all_reduce(
        x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream))
    if ctx.rank == 1:
        ctx.cuda.stream_synchronize(ctx.stream)
        ctx.check_rc("async error", ctx.nccl.async_error(comm)[1],
                     NCCL_SYSTEM_ERROR)
        ctx.check_rc("call 3", ctx.nccl.all_reduce(
            x.ptr, x.ptr, 8, NCCL_FLOAT32, NCCL_SUM, comm, ctx.stream),
            NCCL_SYSTEM_ERROR)
        ctx.check_rc("abort", ctx.nccl.comm_abort(comm))
        return {}
    time.sleep(0.4)
    ctx.check(not ctx.cuda.stream_query(ctx.stream),
              "call 2 completed without the failing rank")
    ctx.check_rc("async error of the healthy rank",
                 ctx.nccl.async_error(comm)[1])
    _abort_and_check(ctx, comm)
    return {}


def scenario_exit_open(ctx: Rank) -> Dict[str, Any]:
    """Rank 0 leaves with an allreduce pending and its comm open."""
    comm = ctx.init()
    if ctx.rank == 0:
        _wait_for_peer_forever(ctx, comm)
        ctx.check(_segment_appears(ctx, "o0-c0"),
                  "rank 0's segment is not in the shm directory")
    else:
        ctx.check_rc("destroy", ctx.nccl.comm_destroy(comm))
    return {}


SCENARIOS: Dict[str, Callable[[Rank], Dict[str, Any]]] = {
    "collectives": scenario_collectives,
    "basic": scenario_basic,
    "large": scenario_large,
    "abort": scenario_abort,
    "inject_sync": scenario_inject_sync,
    "inject_async": scenario_inject_async,
    "exit_open": scenario_exit_open,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs SCENARIO RANK NRANKS UID_HEX; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    scenario, rank, nranks, uid_hex = args
    ctx = Rank(int(rank), int(nranks), bytes.fromhex(uid_hex))
    result = SCENARIOS[scenario](ctx)
    if ctx.failures:
        for failure in ctx.failures:
            print("FAILED: " + failure, file=sys.stderr)
        return 1
    result["passed"] = ctx.passed
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
