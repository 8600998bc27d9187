"""hbcore allreduce benchmark: hbcore against raw mpi4py, same bytes, same run.

Run (2 ranks is what the targets are written for)::

    mpiexec -n 2 python benchmarks/allreduce.py
    python -m hbcore.launcher.cli -np 2 python benchmarks/allreduce.py
    # two hosts (or two emulated on one machine: MPI sees two nodes)
    hbrun -np 2 -H hA:1,hB:1 --mpi-args="-launcher fork" python benchmarks/allreduce.py
    ... benchmarks/allreduce.py --quick             # smoke run, ~10-15 s
    ... benchmarks/allreduce.py --json out.json     # also write the numbers

Rank 0 prints one table. Every row times hbcore and mpi4py (MPI.COMM_WORLD,
the same libmpi in the same process; hbcore uses its own duplicated
communicator) on the same float32 buffers with reduce op Sum. Each
measurement is a median over repetitions; a repetition starts after a
barrier, the hbcore and mpi4py repetitions are interleaved (in alternating
order), and its time is the slowest rank's.

    ratio = mpi4py time / hbcore time. Above 1 means hbcore is faster; for
    the sweep rows it is also the bus-bandwidth ratio hbcore / mpi4py.
    bus bandwidth = bytes * 2 * (n - 1) / n / time (n = ranks).

Rows:
  allreduce out-of-place  hb.allreduce(x, op=Sum) (allocates its output)
                          vs comm.Allreduce(src, dst) into a reused dst.
  allreduce in-place      hb.allreduce_(x) vs comm.Allreduce(IN_PLACE, x).
                          Sweep sizes 4 B .. 64 MiB in powers of 4; small
                          sizes time many back-to-back calls per repetition.
  small allreduce by path 4 B and 4 KiB out of place: Sum, which the fast
                          path carries with the negotiation
                          (HB_FAST_PATH_THRESHOLD), and Min on the same
                          bytes, which takes the ordinary path (negotiation,
                          then its own collective), each vs the same
                          comm.Allreduce, interleaved: the fast path's gain
                          within one job; no target.
  small step              200 float32 tensors of 16 KiB, each submitted
                          under a fixed name (so the response cache is warm),
                          then all synchronized. In place, as a distributed
                          optimizer reduces gradients (horovod.torch's
                          DistributedOptimizer calls allreduce_async_):
                          hb.allreduce_async_ vs 200 per-tensor
                          comm.Allreduce(IN_PLACE, t) calls, and vs one
                          comm.Allreduce of a pre-concatenated 3.2 MB buffer:
                          the floor for these bytes, the faster of out of
                          place and in place (concatenation untimed). Out of
                          place, for reference: hb.allreduce_async (a new
                          output array per tensor) vs 200
                          comm.Allreduce(src, dst) into reused outputs.
                          Last, "bound" (no target): per-tensor time /
                          floor, MPI alone, the speedup a runtime that fused
                          for free would show: the judged ratio's ceiling.
  gradient step           the same 200 tensors plus 4 of 4 MiB (one after
                          every 50 small ones), against the same references,
                          and against hbcore's own plan run by MPI alone
                          (one comm.Allreduce(IN_PLACE) of a 3.2 MB buffer,
                          one per 4 MiB tensor: fusion.h runs those alone),
                          which is the step without fusion copies or
                          negotiation; its "bound" row is that plan's time /
                          floor, where a runtime running the plan for free
                          would land. Then the step and the floor again
                          with every buffer on one kind of page, 4 KiB or
                          2 MiB (no target): numpy's own arrays are on huge
                          pages only where a 2 MiB-aligned stretch fits in
                          them (most of the floor's 20 MB buffer, about
                          half of a 4 MiB tensor), and MPI's transfers
                          between processes read huge pages much faster,
                          so the judged row mixes two kinds of memory.
  allgather per rank      jobs across hosts only: hb.allgather of 4 KiB,
                          256 KiB and 4 MiB per rank (hierarchical when the
                          layout line says so) vs comm.Allgatherv into a
                          reused output; no target.
  single 4 B allreduce    one 4-byte allreduce per repetition, submitted by
                          all ranks right after a barrier (unlike the 4 B
                          sweep rows, which time back-to-back calls).
  idle CPU                CPU time (user + system, all threads) of an
                          initialized, idle process while its main thread
                          sleeps (30 s; 2 s with --quick), in % of one
                          core; max over ranks.
  first after idle        the 4-byte allreduce every rank submits right
                          after that idle window (the runtime has gone
                          dormant: a cheap idle must not be slow to wake),
                          beside one mpi4py Allreduce of 4 B submitted the
                          same way; no target, printed beside the idle row.

Targets (from the issue, at 2 ranks) are printed next to the rows they apply
to, with PASS/FAIL: bus bandwidth of large tensors (>= 16 MiB) >= 0.95x MPI
in place and >= 0.85x out of place; small tensors (4 B - 4 KiB) at most 3x
mpi4py's time, in and out of place; small step >= 2x faster than per-tensor
MPI; gradient step within 1.3x of the one-buffer floor (both in place);
single 4 B allreduce
under 1 ms; idle CPU < 1% of a core per rank. Across hosts (the header's
layout line says which layout ran): the gradient step within 1.2x of the
floor and the single 4 B allreduce under 50 us; the others as above. Timings on a small shared
machine are noisy: rerun before trusting a FAIL that is close to the line.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import hbcore_paths  # noqa: E402

sys.path[:0] = hbcore_paths()
import hbcore as hb  # noqa: E402
from _timing import measure  # noqa: E402

import mpi4py  # noqa: E402  (after hbcore: it loads the shared libmpi first)

mpi4py.rc.initialize = False  # hb.init() initialises MPI (THREAD_MULTIPLE)
from mpi4py import MPI  # noqa: E402

KIB = 1024
MIB = 1024 * KIB

LARGE_BYTES = 16 * MIB           # sweep rows at or above this get a target
TARGET_INPLACE_BW = 0.95         # hbcore / MPI bus bandwidth, in place
TARGET_OUTOFPLACE_BW = 0.85      # hbcore / MPI bus bandwidth, out of place
SMALL_TENSOR_BYTES = 4 * KIB     # sweep rows up to this get a latency target
TARGET_SMALL_OVER_MPI = 3.0      # hbcore time / mpi4py time, 4 B - 4 KiB
TARGET_SMALL_SPEEDUP = 2.0       # per-tensor MPI time / hbcore step time
TARGET_GRADIENT_OVER_FLOOR = 1.3  # hbcore step time / one-buffer MPI time
TARGET_SINGLE_LATENCY_S = 1e-3   # single 4 B allreduce, "well under 1 ms"
# Jobs spanning hosts (cross_size() > 1) have their own targets.
MULTIHOST_GRADIENT_OVER_FLOOR = 1.2
MULTIHOST_SINGLE_LATENCY_S = 50e-6
TARGET_IDLE_CPU_PERCENT = 1.0    # % of one core per rank

SMALL_COUNT = 200
SMALL_BYTES = 16 * KIB
LARGE_COUNT = 4
LARGE_TENSOR_BYTES = 4 * MIB

FLOAT32 = np.dtype(np.float32)


@dataclass
class Settings:
    """How much to measure; --quick picks the small variant."""
    sizes: List[int]
    reps_small: int    # repetitions for sizes <= 1 MiB and the steps
    reps_large: int    # repetitions for larger sizes
    single_reps: int
    idle_seconds: float
    warmup: int = 3


FULL = Settings(sizes=[4 ** k for k in range(1, 14)], reps_small=40,
                reps_large=15, single_reps=200, idle_seconds=30.0)
QUICK = Settings(sizes=[4, 4 * KIB, 256 * KIB, 16 * MIB, 64 * MIB],
                 reps_small=10, reps_large=5, single_reps=40,
                 idle_seconds=2.0, warmup=2)


@dataclass
class Row:
    """One line of the table. Times are seconds; ratio = mpi_s / hb_s."""
    section: str
    case: str
    nbytes: int = 0
    hb_s: Optional[float] = None
    mpi_s: Optional[float] = None
    hb_busbw: Optional[float] = None   # bytes/s
    mpi_busbw: Optional[float] = None
    ratio: Optional[float] = None
    value: Optional[str] = None        # for rows that are not timings
    target: str = ""
    passed: Optional[bool] = None
    extra: dict = field(default_factory=dict)


# --- measuring -------------------------------------------------------------

def inner_calls(nbytes: int) -> int:
    """Back-to-back calls per repetition: many for tiny buffers, 1 for big."""
    return int(min(100, max(1, MIB // max(nbytes, 1))))


def bus_bandwidth(nbytes: int, seconds: float, size: int) -> float:
    return nbytes * 2.0 * (size - 1) / size / seconds if size > 1 else 0.0


def expected_sum(size: int) -> float:
    """Sum over ranks of (rank + 1), the value every check expects."""
    return size * (size + 1) / 2.0


def check(name: str, arrays: Sequence[np.ndarray], expected: float) -> None:
    """Fails loudly if a result is wrong: a fast wrong answer is no result."""
    for a in arrays:
        if a.size and not np.all(a == expected):
            raise AssertionError("%s: wrong allreduce result (expected %g, "
                                 "got e.g. %r)" % (name, expected, a.flat[0]))


# --- the sweep -------------------------------------------------------------

def sweep(comm: MPI.Intracomm, nbytes: int, s: Settings,
          in_place: bool) -> Row:
    """One size of the sweep: hb.allreduce_ / hb.allreduce vs Allreduce."""
    rank, size = comm.Get_rank(), comm.Get_size()
    src = np.full(max(1, nbytes // FLOAT32.itemsize), rank + 1, FLOAT32)
    dst = src if in_place else np.empty_like(src)
    mode = "in-place" if in_place else "out-of-place"
    name = "bench.%s.%d" % (mode, nbytes)

    def run_hb() -> np.ndarray:
        if in_place:
            return hb.allreduce_(src, op=hb.Sum, name=name)
        return hb.allreduce(src, op=hb.Sum, name=name)  # allocates its output

    def run_mpi() -> None:
        comm.Allreduce(MPI.IN_PLACE if in_place else src, dst)

    check(name, [run_hb()], expected_sum(size))
    src[:] = rank + 1
    run_mpi()
    check("mpi4py " + name, [dst], expected_sum(size))
    if in_place:
        src[:] = 0  # repeated in-place sums of zeros stay zeros (no overflow)

    reps = s.reps_small if nbytes <= MIB else s.reps_large
    hb_s, mpi_s = measure(comm, [run_hb, run_mpi], reps, inner_calls(nbytes),
                          s.warmup)
    row = sweep_row("allreduce " + mode, nbytes, hb_s, mpi_s, size)
    if nbytes >= LARGE_BYTES:
        target = TARGET_INPLACE_BW if in_place else TARGET_OUTOFPLACE_BW
        judge(row, row.ratio >= target, "ratio >= %.2f" % target)
    elif nbytes <= SMALL_TENSOR_BYTES:
        judge(row, row.ratio >= 1 / TARGET_SMALL_OVER_MPI,
              "ratio >= %.2f (%gx mpi4py)" % (1 / TARGET_SMALL_OVER_MPI,
                                              TARGET_SMALL_OVER_MPI))
    return row


def fast_path_rows(comm: MPI.Intracomm, s: Settings) -> List[Row]:
    """4 B and 4 KiB allreduces out of place, Sum (carried with the
    negotiation: HB_FAST_PATH_THRESHOLD) against Min (same bytes, not
    eligible: the ordinary path, its own collective after the negotiation),
    each beside mpi4py, all interleaved in one measurement: the fast path's
    gain within one job, whatever the machine's load. No target."""
    rows = []
    for nbytes in (4, SMALL_TENSOR_BYTES):
        src = np.ones(nbytes // FLOAT32.itemsize, FLOAT32)
        dst = np.empty_like(src)
        fns = [lambda: hb.allreduce(src, op=hb.Sum,
                                    name="bench.fast.%d" % nbytes),
               lambda: hb.allreduce(src, op=hb.Min,
                                    name="bench.ordinary.%d" % nbytes),
               lambda: comm.Allreduce(src, dst)]
        fast_s, ordinary_s, mpi_s = measure(
            comm, fns, s.reps_small, inner_calls(nbytes), s.warmup)
        for how, hb_s in (("Sum (fast path)", fast_s),
                          ("Min (ordinary path)", ordinary_s)):
            rows.append(compared_row("small allreduce by path",
                                     "%s, %s" % (format_bytes(nbytes), how),
                                     nbytes, hb_s, mpi_s, comm.Get_size()))
    return rows


def compared_row(section: str, case: str, nbytes: int, hb_s: float,
                 mpi_s: float, size: int, **extra: object) -> Row:
    """A row timing hbcore against MPI on the same bytes, with both bus
    bandwidths and the ratio filled in."""
    return Row(section=section, case=case, nbytes=nbytes, hb_s=hb_s,
               mpi_s=mpi_s, hb_busbw=bus_bandwidth(nbytes, hb_s, size),
               mpi_busbw=bus_bandwidth(nbytes, mpi_s, size),
               ratio=mpi_s / hb_s, extra=dict(extra))


def sweep_row(section: str, nbytes: int, hb_s: float, mpi_s: float,
              size: int) -> Row:
    return compared_row(section, format_bytes(nbytes), nbytes, hb_s, mpi_s,
                        size)


def judge(row: Row, ok: bool, target: str) -> None:
    row.target = target
    row.passed = bool(ok)


# --- steps of many tensors -------------------------------------------------

def step_tensors(rank: int, with_large: bool) -> List[np.ndarray]:
    """200 small tensors, plus (gradient step) a 4 MiB one after every 50."""
    small_n = SMALL_BYTES // FLOAT32.itemsize
    large_n = LARGE_TENSOR_BYTES // FLOAT32.itemsize
    every = SMALL_COUNT // LARGE_COUNT
    tensors = []
    for i in range(SMALL_COUNT):
        tensors.append(np.full(small_n, rank + 1, FLOAT32))
        if with_large and (i + 1) % every == 0:
            tensors.append(np.full(large_n, rank + 1, FLOAT32))
    return tensors


def hb_step(tensors: Sequence[np.ndarray], names: Sequence[str],
            in_place: bool) -> List[np.ndarray]:
    submit = hb.allreduce_async_ if in_place else hb.allreduce_async
    handles = [submit(t, op=hb.Sum, name=n) for t, n in zip(tensors, names)]
    return [hb.synchronize(h) for h in handles]


def step_rows(comm: MPI.Intracomm, section: str, with_large: bool,
              s: Settings) -> List[Row]:
    """Times one step with hbcore (in place and out of place), per-tensor
    MPI (the same two ways) and one-buffer MPI."""
    rank, size = comm.Get_rank(), comm.Get_size()
    tensors = step_tensors(rank, with_large)
    zeros = [np.zeros_like(t) for t in tensors]  # in place: zeros stay zeros
    names = ["bench.%s.%d" % (section.split()[0], i)
             for i in range(len(tensors))]
    outs = [np.empty_like(t) for t in tensors]
    flat = np.concatenate(tensors)
    flat_out = np.empty_like(flat)
    flat_zeros = np.zeros_like(flat)

    check(section, hb_step(tensors, names, in_place=False),
          expected_sum(size))
    check(section + " in place",
          hb_step([t.copy() for t in tensors], names, in_place=True),
          expected_sum(size))

    def run_hb_in_place() -> None:
        hb_step(zeros, names, in_place=True)

    def run_hb_out_of_place() -> None:
        hb_step(tensors, names, in_place=False)

    def run_per_tensor_in_place() -> None:
        for z in zeros:
            comm.Allreduce(MPI.IN_PLACE, z)

    def run_per_tensor() -> None:
        for t, o in zip(tensors, outs):
            comm.Allreduce(t, o)

    def run_one_buffer() -> None:
        comm.Allreduce(flat, flat_out)

    def run_one_buffer_in_place() -> None:
        comm.Allreduce(MPI.IN_PLACE, flat_zeros)

    # hbcore's own plan done by MPI alone, no copies: one allreduce of a
    # buffer as large as the fused small tensors, one per large tensor (they
    # run alone: fusion.h). What the gradient step can get to without
    # moving the large tensors through a fusion buffer.
    small_zeros = np.zeros(sum(z.size for z in zeros if z.nbytes <= SMALL_BYTES),
                           FLOAT32)
    large_zeros = [z for z in zeros if z.nbytes > SMALL_BYTES]

    def run_hbcore_plan_in_mpi() -> None:
        comm.Allreduce(MPI.IN_PLACE, small_zeros)
        for z in large_zeros:
            comm.Allreduce(MPI.IN_PLACE, z)

    fns = [run_hb_in_place, run_hb_out_of_place, run_per_tensor_in_place,
           run_per_tensor, run_one_buffer, run_one_buffer_in_place]
    if with_large:
        fns.append(run_hbcore_plan_in_mpi)
    times = measure(comm, fns, s.reps_small, warmup=s.warmup)
    check("mpi4py " + section, outs + [flat_out], expected_sum(size))
    label = "%d x %s" % (SMALL_COUNT, format_bytes(SMALL_BYTES))
    if with_large:
        label += " + %d x %s" % (LARGE_COUNT, format_bytes(LARGE_TENSOR_BYTES))
    return judge_step("%s: %s" % (section, label), flat.nbytes, size,
                      with_large, *times)


def judge_step(section: str, nbytes: int, size: int, with_large: bool,
               hb_in_s: float, hb_out_s: float, per_in_s: float,
               per_out_s: float, one_oop_s: float,
               one_inp_s: float, plan_s: Optional[float] = None) -> List[Row]:
    """The rows of a step: in place vs per-tensor MPI and vs the one-buffer
    floor (the rows with targets), then out of place vs per-tensor MPI, and
    (gradient step) in place vs hbcore's plan run by MPI alone."""
    one_s = min(one_oop_s, one_inp_s)  # in place is usually the faster

    def row(case: str, hb_s: float, mpi_s: float, **extra: object) -> Row:
        return compared_row(section, case, nbytes, hb_s, mpi_s, size,
                            **extra)

    vs_per = row("in place vs per-tensor Allreduce", hb_in_s, per_in_s)
    vs_one = row("in place vs one-buffer (floor)", hb_in_s, one_s,
                 one_buffer_out_of_place_s=one_oop_s,
                 one_buffer_in_place_s=one_inp_s)
    out_vs_per = row("out of place vs per-tensor", hb_out_s, per_out_s)
    if with_large:
        limit = (MULTIHOST_GRADIENT_OVER_FLOOR if hb.cross_size() > 1
                 else TARGET_GRADIENT_OVER_FLOOR)
        judge(vs_one, hb_in_s <= limit * one_s,
              "ratio >= %.2f (%gx floor)" % (1 / limit, limit))
    else:
        judge(vs_per, vs_per.ratio >= TARGET_SMALL_SPEEDUP,
              "ratio >= %.1f" % TARGET_SMALL_SPEEDUP)
    rows = [vs_per, vs_one, out_vs_per]
    if plan_s is not None:
        rows.append(row("in place vs its plan in MPI (1+%d)" % LARGE_COUNT,
                        hb_in_s, plan_s))
    rows.append(bound_row(section, per_in_s, one_s, plan_s))
    return rows


def bound_row(section: str, per_in_s: float, one_s: float,
              plan_s: Optional[float]) -> Row:
    """What MPI alone reaches on the judged comparison, which bounds any
    runtime's figure there (no target): for the small step, per-tensor
    time / floor, the speedup of a runtime that fused for free; for the
    gradient step (the one with ``plan_s``), hbcore's plan run by MPI (no
    copies, no negotiation) / floor, where a runtime that runs that plan
    for free lands."""
    if plan_s is not None:
        return Row(section=section, case="bound: its plan in MPI / floor",
                   value="%.2fx" % (plan_s / one_s),
                   extra={"plan_over_floor": plan_s / one_s})
    return Row(section=section, case="bound: per-tensor / floor",
               value="%.2fx" % (per_in_s / one_s),
               extra={"per_tensor_over_floor": per_in_s / one_s})


# --- the gradient step on one kind of page ---------------------------------

HUGE_PAGE = 2 * MIB


def zeros_on_pages(count: int, huge: bool) -> np.ndarray:
    """``count`` float32 zeros on one kind of page: 2 MiB-aligned and
    advised onto transparent huge pages, or advised off them (4 KiB)."""
    nbytes = count * FLOAT32.itemsize
    rounded = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    # Private: shared anonymous memory is shmem, which THP leaves alone.
    memory = mmap.mmap(-1, rounded + HUGE_PAGE,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = np.frombuffer(memory, np.uint8)  # keeps `memory` alive
    offset = (-base.ctypes.data) % HUGE_PAGE
    memory.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE,
                   offset, rounded)
    array = base[offset:offset + nbytes].view(FLOAT32)
    array[:] = 0  # fault the pages in now, under the advice
    return array


def page_kind_rows(comm: MPI.Intracomm, s: Settings) -> List[Row]:
    """The gradient step in place vs the one-buffer floor in place, with
    the 4 MiB tensors and the floor's buffer both on 4 KiB pages, then
    both on 2 MiB pages (the small tensors stay numpy's)."""
    size = comm.Get_size()
    names = ["bench.gradient.%d" % i
             for i in range(SMALL_COUNT + LARGE_COUNT)]
    shapes = step_tensors(0, True)
    nbytes = sum(t.nbytes for t in shapes)
    fns, labels = [], []
    for huge in (False, True):
        tensors = [np.zeros_like(t) if t.nbytes <= SMALL_BYTES else
                   zeros_on_pages(t.size, huge) for t in shapes]
        flat = zeros_on_pages(sum(t.size for t in tensors), huge)
        fns.append(lambda tensors=tensors: hb_step(tensors, names, True))
        fns.append(lambda flat=flat: comm.Allreduce(MPI.IN_PLACE, flat))
        labels.append("2 MiB pages" if huge else "4 KiB pages")
    times = measure(comm, fns, s.reps_small, warmup=s.warmup)
    rows = []
    for i, label in enumerate(labels):
        hb_s, one_s = times[2 * i], times[2 * i + 1]
        rows.append(compared_row("gradient step on one kind of page",
                                 "in place vs floor, " + label, nbytes, hb_s,
                                 one_s, size))
    return rows


# --- allgather across hosts -----------------------------------------------

ALLGATHER_BYTES = [4 * KIB, 256 * KIB, 4 * MIB]  # per rank


def allgather_row(comm: MPI.Intracomm, nbytes: int, s: Settings) -> Row:
    """hb.allgather vs mpi4py's Allgatherv of `nbytes` per rank (multi-host
    jobs: the hierarchical allgather's row; no target)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    count = max(1, nbytes // FLOAT32.itemsize)
    src = np.full(count, rank + 1, FLOAT32)
    out = np.empty(count * size, FLOAT32)
    counts = [count] * size
    name = "bench.allgather.%d" % nbytes

    def run_hb() -> np.ndarray:
        return hb.allgather(src, name=name)

    def run_mpi() -> None:
        comm.Allgatherv(src, [out, counts])

    want = np.repeat(np.arange(1, size + 1, dtype=FLOAT32), count)
    run_mpi()
    if not (np.array_equal(run_hb(), want) and np.array_equal(out, want)):
        raise AssertionError("allgather of %d B gave wrong data" % nbytes)
    reps = s.reps_small if nbytes <= MIB else s.reps_large
    hb_s, mpi_s = measure(comm, [run_hb, run_mpi], reps, inner_calls(nbytes),
                          s.warmup)
    return Row(section="allgather per rank", case=format_bytes(nbytes),
               nbytes=nbytes, hb_s=hb_s, mpi_s=mpi_s, ratio=mpi_s / hb_s)


# --- single op latency and idle CPU ----------------------------------------

def single_op_row(comm: MPI.Intracomm, s: Settings) -> Row:
    buf = np.ones(1, FLOAT32)
    out = np.empty_like(buf)
    name = "bench.single4"

    def run_hb() -> None:
        hb.allreduce(buf, op=hb.Sum, name=name)

    def run_mpi() -> None:
        comm.Allreduce(buf, out)

    hb_s, mpi_s = measure(comm, [run_hb, run_mpi], s.single_reps,
                          warmup=s.warmup)
    row = Row(section="single allreduce after barrier", case="4 B",
              nbytes=4, hb_s=hb_s, mpi_s=mpi_s, ratio=mpi_s / hb_s)
    if hb.cross_size() > 1:
        judge(row, hb_s < MULTIHOST_SINGLE_LATENCY_S,
              "hb < %g us" % (MULTIHOST_SINGLE_LATENCY_S * 1e6))
    else:
        judge(row, hb_s < TARGET_SINGLE_LATENCY_S,
              "hb < %g ms" % (TARGET_SINGLE_LATENCY_S * 1e3))
    return row


def idle_rows(comm: MPI.Intracomm, seconds: float) -> List[Row]:
    """CPU used by this process (all threads) while the main thread
    sleeps; then the first 4 B allreduce after that idle window, beside
    one mpi4py 4 B allreduce, both submitted right after a barrier."""
    process = psutil.Process()
    comm.Barrier()
    before = process.cpu_times()
    fine_before = time.process_time()  # ns resolution; psutil's is 10 ms
    start = time.perf_counter()
    time.sleep(seconds)
    after = process.cpu_times()
    fine = time.process_time() - fine_before
    wall = time.perf_counter() - start
    used = (after.user + after.system) - (before.user + before.system)
    percents = comm.allgather(100.0 * used / wall)
    fine_percents = comm.allgather(100.0 * fine / wall)
    worst = max(percents)
    row = Row(section="idle runtime CPU",
              case="%g s window, max over ranks" % seconds,
              value="%.2f %%" % worst,
              extra={"percent_of_core_per_rank": percents,
                     "process_time_percent_per_rank": fine_percents})
    judge(row, worst < TARGET_IDLE_CPU_PERCENT,
          "< %g %% of a core" % TARGET_IDLE_CPU_PERCENT)
    return [row, first_after_idle_row(comm)]


def first_after_idle_row(comm: MPI.Intracomm) -> Row:
    """One 4 B hb.allreduce right after the idle window (max over ranks),
    then one comm.Allreduce of 4 B, each after a barrier."""
    buf = np.ones(1, FLOAT32)
    out = np.empty_like(buf)
    comm.Barrier()
    start = time.perf_counter()
    hb.allreduce(buf, op=hb.Sum, name="bench.single4")
    hb_s = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    comm.Barrier()
    start = time.perf_counter()
    comm.Allreduce(buf, out)
    mpi_s = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return Row(section="idle runtime CPU", case="first 4 B after idle",
               nbytes=4, hb_s=hb_s, mpi_s=mpi_s, ratio=mpi_s / hb_s)


class LoadMonitor:
    """How busy other processes kept this host's CPUs during the run.

    System-wide busy CPU time (steal included) minus what the ranks used, in
    % of all CPUs. Meaningful when every rank runs on this host.
    """

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self.process = psutil.Process()
        self.system = psutil.cpu_times()
        self.own = self._own_seconds()
        self.start = time.perf_counter()

    def _own_seconds(self) -> float:
        t = self.process.cpu_times()
        return t.user + t.system

    @staticmethod
    def _busy_seconds(t: object) -> float:
        idle = getattr(t, "idle", 0.0) + getattr(t, "iowait", 0.0)
        total = sum(getattr(t, f) for f in t._fields
                    if f not in ("guest", "guest_nice"))
        return total - idle

    def foreign_percent(self) -> Optional[float]:
        """Collective: every rank must call it. None on multi-host jobs."""
        own = self.comm.allreduce(self._own_seconds() - self.own)
        if hb.local_size() != hb.size():
            return None
        busy = (self._busy_seconds(psutil.cpu_times())
                - self._busy_seconds(self.system))
        wall = time.perf_counter() - self.start
        return 100.0 * max(0.0, busy - own) / wall / psutil.cpu_count()


# --- output ----------------------------------------------------------------

def format_bytes(n: int) -> str:
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return "%g %s" % (n / scale, unit)
    return "%d B" % n


def format_time(t: Optional[float]) -> str:
    if t is None:
        return "-"
    if t < 1e-3:
        return "%.1f us" % (t * 1e6)
    return "%.3f ms" % (t * 1e3)


def format_bw(bw: Optional[float]) -> str:
    return "-" if bw is None else "%.2f" % (bw / 1e9)


COLUMNS = (("case", 33, "<"), ("hbcore", 11, ">"), ("mpi4py", 11, ">"),
           ("ratio", 6, ">"), ("hb GB/s", 8, ">"), ("mpi GB/s", 8, ">"),
           ("target", 24, "<"), ("", 4, "<"))


def format_line(cells: Sequence[str]) -> str:
    return "  ".join("{:{}{}}".format(c, align, width)
                     for c, (_, width, align) in zip(cells, COLUMNS)).rstrip()


def format_table(rows: Sequence[Row], header: Sequence[str]) -> str:
    lines = list(header)
    lines.append(format_line([c[0] for c in COLUMNS]))
    rule = "-" * len(lines[-1])
    lines.append(rule)
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            lines.append("[%s]" % section)
        verdict = "" if r.passed is None else ("PASS" if r.passed else "FAIL")
        hb_cell = r.value if r.value is not None else format_time(r.hb_s)
        ratio = "-" if r.ratio is None else "%.2f" % r.ratio
        lines.append(format_line([
            "  " + r.case, hb_cell, format_time(r.mpi_s), ratio,
            format_bw(r.hb_busbw), format_bw(r.mpi_busbw), r.target,
            verdict]))
    lines.append(rule)
    judged = [r for r in rows if r.passed is not None]
    failed = [r for r in judged if not r.passed]
    lines.append("targets: %d PASS, %d FAIL" % (len(judged) - len(failed),
                                                len(failed)))
    return "\n".join(lines)


def layout_line(comm: MPI.Intracomm) -> str:
    """Hosts, ranks per host and which allreduce path fused batches take.
    Collective: every rank calls it."""
    local_sizes = comm.allgather(hb.local_size())
    hosts = hb.cross_size() if hb.local_rank() == 0 else None
    hosts = comm.bcast(hosts, root=0)
    per_host = ("%d" % local_sizes[0] if len(set(local_sizes)) == 1
                else "uneven (%s)" % ",".join(map(str, local_sizes)))
    if hosts == 1:
        path = "node shared memory" if comm.Get_size() > 1 else "none"
    else:
        choice = os.environ.get("HB_HIERARCHICAL_ALLREDUCE",
                                os.environ.get("HOROVOD_HIERARCHICAL_ALLREDUCE",
                                               "auto"))
        hierarchical = (len(set(local_sizes)) == 1 and local_sizes[0] > 1
                        and choice not in ("0", "false"))
        ring = os.environ.get("HB_RING_ALLREDUCE",
                              os.environ.get("HOROVOD_RING_ALLREDUCE", "auto"))
        across = ("hbcore's ring (64 KiB and up)"
                  if ring not in ("0", "false") else "MPI_Allreduce")
        path = ("hierarchical (shared memory within hosts, %s across)" % across
                if hierarchical else "flat, pipelined, %s" % across)
        choice = os.environ.get("HB_HIERARCHICAL_ALLGATHER",
                                os.environ.get("HOROVOD_HIERARCHICAL_ALLGATHER",
                                               "auto"))
        gather = ("hierarchical (within hosts, then between leaders)"
                  if max(local_sizes) > 1 and choice not in ("0", "false")
                  else "flat MPI")
        path += "; allgathers: " + gather
    return "%d host(s) x %s rank(s); fused allreduces: %s" % (hosts, per_host,
                                                              path)


# Environment variables the header reports: hbcore's (and Horovod's
# aliases), MPICH's control variables, UCX's and libfabric's.
SETTING_PREFIXES = ("HB_", "HOROVOD_", "MPIR_CVAR_", "UCX_", "FI_")


def header_lines(comm: MPI.Intracomm, args: argparse.Namespace,
                 foreign: Optional[float], layout: str) -> List[str]:
    size = comm.Get_size()
    mpi = MPI.Get_library_version().strip().splitlines()[0]
    # hbcore's knobs and the MPI library's: UCX_TLS=tcp,self, say, makes
    # emulated hosts talk through TCP instead of shared memory and CMA.
    knobs = " ".join("%s=%s" % kv for kv in sorted(os.environ.items())
                     if kv[0].startswith(SETTING_PREFIXES))
    lines = [
        "hbcore %s allreduce benchmark (%s): %d ranks, %s, %d CPUs" % (
            hb.__version__, "quick" if args.quick else "full", size,
            " ".join(mpi.split()), psutil.cpu_count()),
        "float32 Sum; times are medians of the slowest rank; "
        "ratio = mpi4py time / hbcore time (>1: hbcore faster; "
        "= busbw ratio)",
    ]
    lines.append("layout: " + layout)
    if knobs:
        lines.append("settings: " + knobs)
    if foreign is not None:
        lines.append("other processes kept the CPUs %.0f%% busy during the "
                     "run%s" % (foreign, " (numbers unreliable)"
                                if foreign > 10 else ""))
    if size != 2:
        lines.append("note: the targets are written for 2 ranks")
    return lines


# --- main ------------------------------------------------------------------

def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="hbcore vs mpi4py allreduce benchmark (see the module "
                    "docstring for what each row means)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes and repetitions, 2 s idle window")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the rows as JSON (rank 0)")
    return parser.parse_args(argv)


def run(comm: MPI.Intracomm, s: Settings) -> List[Row]:
    rows: List[Row] = []
    for in_place in (False, True):
        rows += [sweep(comm, nbytes, s, in_place) for nbytes in s.sizes]
    rows += fast_path_rows(comm, s)
    rows += step_rows(comm, "small step", with_large=False, s=s)
    rows += step_rows(comm, "gradient step", with_large=True, s=s)
    rows += page_kind_rows(comm, s)
    if comm.allreduce(hb.cross_size(), op=MPI.MAX) > 1:
        rows += [allgather_row(comm, n, s) for n in ALLGATHER_BYTES]
    rows.append(single_op_row(comm, s))
    rows += idle_rows(comm, s.idle_seconds)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    hb.init()
    comm = MPI.COMM_WORLD
    settings = QUICK if args.quick else FULL
    load = LoadMonitor(comm)
    rows = run(comm, settings)
    foreign = load.foreign_percent()
    layout = layout_line(comm)
    if comm.Get_rank() == 0:
        header = header_lines(comm, args, foreign, layout)
        print(format_table(rows, header), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "ranks": comm.Get_size(),
                           "quick": args.quick,
                           "foreign_cpu_percent": foreign,
                           "rows": [asdict(r) for r in rows]}, f, indent=1)
    comm.Barrier()
    hb.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
