"""Timing collectives fairly across ranks: the one measuring loop of the
MPI-launched benchmarks (allreduce.py, tf_ops.py)."""
import time
from typing import Any, Callable, List, Sequence

import numpy as np


def measure(comm: Any, fns: Sequence[Callable[[], object]], reps: int,
            inner: int = 1, warmup: int = 3) -> List[float]:
    """Times each of ``fns``; returns per-call seconds for each.

    Every repetition: a barrier on ``comm`` (an mpi4py communicator), then
    ``inner`` calls. The functions' repetitions are interleaved, rotating
    which goes first, so a slow minute of a shared machine hits them all.

    Returns:
        For each function, the median over repetitions of the slowest
        rank's time per call.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    local = np.zeros((len(fns), reps))
    for rep in range(reps):
        for k in range(len(fns)):
            i = (rep + k) % len(fns)
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(inner):
                fns[i]()
            local[i, rep] = (time.perf_counter() - start) / inner
    slowest = np.max(np.stack(comm.allgather(local)), axis=0)
    return [float(np.median(slowest[i])) for i in range(len(fns))]
