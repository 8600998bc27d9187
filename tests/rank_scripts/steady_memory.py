"""Rank script: a long loop of training-like steps holds its memory steady.

    hbrun -np N python steady_memory.py STEPS

Each step submits what a week-long job submits over and over: 50 named
small allreduces and a 4 MiB one (the fused batch and a tensor that runs
alone, its output from the pool), an unnamed allreduce (a fresh name every
call), an allgather whose first dimension changes from step to step, a
broadcast under a name used once, an in-place allreduce, an alltoall and
a broadcast_object; every tenth step also a rank-divergent allreduce that
fails with MismatchError (the error path). Every result is checked
against numpy. The process's anonymous resident memory (RssAnon: what a
leak grows; MPI's shared-memory segments are counted apart) is read at a
third, two thirds and the end of the steps.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import anon_rss_bytes, env_rank, report  # noqa: E402

import hbcore as hb  # noqa: E402
from hbcore.exceptions import MismatchError  # noqa: E402


def step(i: int, rank: int, size: int, small, big) -> None:
    ranks_sum = size * (size - 1) / 2
    handles = [hb.allreduce_async(t, op=hb.Sum, name="small%d" % j)
               for j, t in enumerate(small)]
    big_handle = hb.allreduce_async(big, op=hb.Sum, name="big")
    unnamed = hb.allreduce_async(np.full(3, rank, np.float32), op=hb.Sum)
    rows = 1 + i % 3
    gathered = hb.allgather_async(np.full((rows + rank, 2), rank, np.float64))
    sent = hb.broadcast_async(np.arange(5.0) + i, root_rank=0,
                              name="once%d" % i)
    for j, handle in enumerate(handles):
        got = hb.synchronize(handle)
        if got[0] != j * size + ranks_sum:
            raise AssertionError("step %d small%d: %r" % (i, j, got[:3]))
    if not np.all(hb.synchronize(big_handle) == size):
        raise AssertionError("step %d: big allreduce" % i)
    if not np.array_equal(hb.synchronize(unnamed), np.full(3, ranks_sum)):
        raise AssertionError("step %d: unnamed allreduce" % i)
    want = np.concatenate([np.full((rows + r, 2), r, np.float64)
                           for r in range(size)])
    if not np.array_equal(hb.synchronize(gathered), want):
        raise AssertionError("step %d: allgather" % i)
    if not np.array_equal(hb.synchronize(sent), np.arange(5.0) + i):
        raise AssertionError("step %d: broadcast" % i)
    inplace = np.full(1000, rank + 1, np.int32)
    hb.allreduce_(inplace, op=hb.Sum, name="inplace")
    if not np.all(inplace == size * (size + 1) // 2):
        raise AssertionError("step %d: in-place allreduce" % i)
    received = hb.alltoall(np.full(2 * size, rank, np.float32), name="a2a")
    if not np.array_equal(received, np.repeat(np.arange(size), 2)):
        raise AssertionError("step %d: alltoall" % i)
    if hb.broadcast_object({"step": i}, root_rank=0) != {"step": i}:
        raise AssertionError("step %d: broadcast_object" % i)
    if i % 10 == 0:
        try:
            hb.allreduce(np.ones(2 + rank, np.float32), name="divergent")
        except MismatchError:
            pass
        else:
            raise AssertionError("step %d: no MismatchError" % i)


def main() -> None:
    steps = int(sys.argv[1])
    rank = env_rank()
    hb.init()
    size = hb.size()
    small = [np.full(4096, j + rank, np.float32) for j in range(50)]
    big = np.ones(1 << 20, np.float32)
    marks = [steps // 3, 2 * steps // 3, steps]
    rss = []
    for i in range(steps):
        step(i, rank, size, small, big)
        if i + 1 in marks:
            rss.append(anon_rss_bytes())
    hb.barrier()
    hb.shutdown()
    report({"marks": marks, "anon_rss": rss})


if __name__ == "__main__":
    main()
