"""Rank script: hbcore.init(comm=...) over part of MPI_COMM_WORLD.

Usage: init_comm.py MODE, where MODE is
  split  every rank passes the mpi4py communicator of its color (world rank
         % 2), so the job runs two independent hbcore runtimes;
  list   ranks 0 .. size-2 pass that list, the last rank passes [itself];
  errors each bad ``comm`` is rejected with its exception type, then plain
         init() still works.
Every rank reports its topology, and its allreduce and allgather results
are checked against numpy sums over the ranks of its own communicator.
"""
import sys

import numpy as np

from common import Checker, env_rank, env_size, exc_info, report

import hbcore as hb

import mpi4py  # noqa: E402  (after hbcore: it loads the shared libmpi first)
from mpi4py import MPI  # noqa: E402


def members(mode: str, world_rank: int, world_size: int) -> list:
    """World ranks of this rank's hbcore communicator, in rank order."""
    if mode == "split":
        return [r for r in range(world_size) if r % 2 == world_rank % 2]
    if mode == "list":
        last = world_size - 1
        return [last] if world_rank == last else list(range(last))
    return list(range(world_size))


def check_collectives(group: list) -> None:
    world_rank = env_rank()
    x = np.arange(6, dtype=np.float64) * (world_rank + 1)
    got = hb.allreduce(x, op=hb.Sum, name="init_comm.sum")
    want = np.arange(6, dtype=np.float64) * sum(r + 1 for r in group)
    np.testing.assert_array_equal(got, want)
    rows = hb.allgather(np.full((1, 2), world_rank, np.int64),
                        name="init_comm.gather")
    np.testing.assert_array_equal(rows[:, 0], group)


def main() -> None:
    mode = sys.argv[1]
    world_rank, world_size = env_rank(), env_size()
    checker = Checker()
    out = {"mode": mode}
    if mode == "errors":
        for name, bad in [("string", "world"), ("out_of_range", [0, world_size]),
                          ("repeated", [0, 0]),
                          ("not_member", [r for r in range(world_size)
                                          if r != world_rank])]:
            try:
                hb.init(comm=bad)
                out[name] = None
            except Exception as exc:  # noqa: BLE001 - the type is the result
                out[name] = exc_info(exc)
            out[name + "_initialized"] = hb.is_initialized()
        try:
            hb.init(comm=MPI.COMM_NULL)
            out["null"] = None
        except Exception as exc:  # noqa: BLE001
            out["null"] = exc_info(exc)
        hb.init()
    elif mode == "split":
        sub = MPI.COMM_WORLD.Split(world_rank % 2, world_rank)
        hb.init(comm=sub)
        sub.Free()  # hbcore works on its own duplicate
    else:
        hb.init(comm=members(mode, world_rank, world_size))
    group = members(mode, world_rank, world_size)
    out.update(rank=hb.rank(), size=hb.size(), local_size=hb.local_size(),
               expected_rank=group.index(world_rank), expected_size=len(group))
    checker.run("collectives", lambda: check_collectives(group))
    # User code keeps its own MPI traffic on the world communicator.
    out["world_sum"] = MPI.COMM_WORLD.allreduce(world_rank)
    out["cases_ok"] = checker.all_ok
    hb.shutdown()
    report(out)


if __name__ == "__main__":
    main()
