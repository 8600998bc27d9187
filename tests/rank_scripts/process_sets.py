"""Rank script: process sets of the numpy API, checked against numpy.

    hbrun -np N python process_sets.py MODE

MODE:
- concurrent: init(process_sets=...) with three overlapping sets (the
  first n-1 ranks, the last n-1 ranks, the first and last rank); every
  member issues allreduce, grouped allreduce, allgather, broadcast,
  alltoall and reducescatter on each of its sets asynchronously,
  interleaved with global allreduces, then waits for all of them.
- errors: non-member submission, mismatches inside a set, a root outside
  the set, splits of the global size; the set keeps working after each.
- dynamic: add/remove after init (HB_DYNAMIC_PROCESS_SETS or its
  HOROVOD_ alias set by the test, or init(process_sets="dynamic") with
  argument "init-dynamic"), sets from mpi4py communicators, duplicates,
  disagreeing members.
- static: without the variable, add/remove raise ValueError saying to set
  it; sets given to init (from ranks and from an mpi4py communicator) work.
- stall: two members submit different tensors on a set and wait; the stall
  shutdown must end every rank (members and not) with ShutdownError naming
  the set (the other ranks wait in join, which is never a stall).
- shutdown: rank 0 shuts down while the other ranks wait on a set's
  collective it never submits: they get ShutdownError naming rank 0.
"""
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, assert_close, env_rank,  # noqa: E402
                    env_size, expect_raises, rank_data,
                    reducescatter_rows, report)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402


# float32 elements of the large allreduce: 80 KB, over the ring's 64 KiB
# minimum (mpi_ring_allreduce.h), split unevenly by a ring of 3.
LARGE_ELEMENTS = 20001


def seed(text: str) -> int:
    return zlib.crc32(text.encode())


def overlapping(size: int):
    """The three overlapping member lists of the concurrent case."""
    return [list(range(size - 1)), list(range(1, size)), [0, size - 1]]


def a2a_splits(member: int, s: int):
    return [(member + j) % 2 + 1 for j in range(s)]


class SetJob:
    """Every collective one rank issues on one set, and their expected
    values (computed with numpy from every member's rank-seeded data)."""

    def __init__(self, ps: "hb.ProcessSet", rank: int) -> None:
        self.ps, self.rank = ps, rank
        self.members = list(ps.ranks)
        self.tag = "set%d" % ps.process_set_id
        self.k = self.members.index(rank)
        self.s = len(self.members)
        self.handles = {}

    def data(self, what: str, member: int, shape, dtype="float32"):
        return rank_data(seed(self.tag + what), member, shape, dtype)

    def submit(self) -> None:
        ps, r = self.ps, self.rank
        h = self.handles
        h["allreduce"] = hb.allreduce_async(
            self.data("ar", r, (6,)), name=self.tag + ".ar", op=hb.Sum,
            process_set=ps)
        # Large enough for the ring where the set's members span hosts.
        h["large"] = hb.allreduce_async(
            self.data("large", r, (LARGE_ELEMENTS,)), name=self.tag + ".large",
            op=hb.Average, process_set=ps)
        h["grouped"] = hb.grouped_allreduce_async(
            [self.data("g0", r, (3,)), self.data("g1", r, (2, 2), "int32")],
            name=self.tag + ".g", op=hb.Sum, process_set=ps)
        h["allgather"] = hb.allgather_async(
            self.data("ag", r, (self.k + 1, 3)), name=self.tag + ".ag",
            process_set=ps)
        h["broadcast"] = hb.broadcast_async(
            self.data("bc", r, (4,)), root_rank=self.members[-1],
            name=self.tag + ".bc", process_set=ps)
        splits = a2a_splits(r, self.s)
        h["alltoall"] = hb.alltoall_async(
            self.data("a2a", r, (sum(splits), 2)), splits=splits,
            name=self.tag + ".a2a", process_set=ps)
        h["reducescatter"] = hb.reducescatter_async(
            self.data("rs", r, (2 * self.s + 1, 2)), name=self.tag + ".rs",
            op=hb.Average, process_set=ps)

    def check(self) -> None:
        m, r, k, s = self.members, self.rank, self.k, self.s
        h = self.handles
        expected = sum(self.data("ar", x, (6,)).astype(np.float64) for x in m)
        assert_close(hb.synchronize(h["allreduce"]),
                     expected.astype(np.float32), "float32", "allreduce")
        mean = sum(self.data("large", x, (LARGE_ELEMENTS,)).astype(np.float64)
                   for x in m) / s
        assert_close(hb.synchronize(h["large"]), mean.astype(np.float32),
                     "float32", "large allreduce")
        g0, g1 = hb.synchronize(h["grouped"])
        assert_close(g0, sum(self.data("g0", x, (3,)).astype(np.float64)
                             for x in m).astype(np.float32), "float32", "g0")
        assert_close(g1, sum(self.data("g1", x, (2, 2), "int32")
                             for x in m).astype(np.int32), "int32", "g1")
        gathered = np.concatenate([self.data("ag", x, (i + 1, 3))
                                   for i, x in enumerate(m)])
        assert_close(hb.synchronize(h["allgather"]), gathered, "float32",
                     "allgather")
        assert_close(hb.synchronize(h["broadcast"]),
                     self.data("bc", m[-1], (4,)), "float32", "broadcast")
        out, received = hb.synchronize(h["alltoall"])
        blocks, counts = [], []
        for x in m:
            sp = a2a_splits(x, s)
            rows = self.data("a2a", x, (sum(sp), 2))
            start = sum(sp[:k])
            blocks.append(rows[start:start + sp[k]])
            counts.append(sp[k])
        assert_close(out, np.concatenate(blocks), "float32", "alltoall")
        if list(received) != counts:
            raise CaseFailure("alltoall received %s, expected %s"
                              % (list(received), counts))
        n = 2 * s + 1
        mean = sum(self.data("rs", x, (n, 2)).astype(np.float64)
                   for x in m) / s
        start, count = reducescatter_rows(n, s, k)
        assert_close(hb.synchronize(h["reducescatter"]),
                     mean[start:start + count].astype(np.float32), "float32",
                     "reducescatter")
        if self.ps.rank() != k or self.ps.size() != s:
            raise CaseFailure("rank()/size() %s/%s, expected %s/%s"
                              % (self.ps.rank(), self.ps.size(), k, s))


def global_allreduce(rank: int, size: int, tag: str):
    return (hb.allreduce_async(rank_data(seed(tag), rank, (5,), "float64"),
                               name=tag, op=hb.Sum),
            sum(rank_data(seed(tag), x, (5,), "float64")
                for x in range(size)))


def concurrent(check: Checker, rank: int, size: int) -> None:
    sets = [hb.ProcessSet(m) for m in overlapping(size)]
    hb.init(process_sets=sets)

    def ids_and_ranks():
        ids = [ps.process_set_id for ps in sets]
        if ids != [1, 2, 3]:
            raise CaseFailure("ids %s" % ids)
        if hb.global_process_set.ranks != list(range(size)):
            raise CaseFailure("global ranks %s" % hb.global_process_set.ranks)
        for ps, members in zip(sets, overlapping(size)):
            if ps.included() != (rank in members):
                raise CaseFailure("included() of %s" % ps)
            if ps.size() != len(members):
                raise CaseFailure("size() of %s: %s" % (ps, ps.size()))
            if rank not in members:
                expect_raises(ps.rank, ValueError, "not part")

    check.run("concurrent/ids", ids_and_ranks)

    def all_at_once(round_: int):
        jobs = [SetJob(ps, rank) for ps in sets if ps.included()]
        pending = [global_allreduce(rank, size, "g%d.before" % round_)]
        for i, job in enumerate(jobs):
            job.submit()
            pending.append(global_allreduce(rank, size,
                                            "g%d.%d" % (round_, i)))
        # Blocking calls on the sets meanwhile, in ascending set id (blocking
        # calls in different orders on overlapping sets would deadlock any
        # collective library: each rank would wait in a different set).
        for job in jobs:
            x = rank_data(seed("sync%d" % round_), rank, (3,), "float32")
            out = hb.allreduce(x, op=hb.Max, name="sync%d" % round_,
                               process_set=job.ps)
            want = np.max([rank_data(seed("sync%d" % round_), m, (3,),
                                     "float32") for m in job.members], 0)
            assert_close(out, want, "float32", "sync allreduce")
            hb.barrier(process_set=job.ps)
        for handle, want in pending:
            assert_close(hb.synchronize(handle), want, "float64", "global")
        for job in jobs:
            job.check()
        hb.barrier()  # nobody shuts down while peers still use their sets

    # Twice: the second round runs from every set's response cache.
    check.run("concurrent/round0", lambda: all_at_once(0))
    check.run("concurrent/round1", lambda: all_at_once(1))


def errors(check: Checker, rank: int, size: int) -> None:
    members = list(range(1, size))
    ps = hb.ProcessSet(members)
    hb.init(process_sets=[ps])
    member = rank in members

    def non_member():
        if member:
            return
        exc = expect_raises(
            lambda: hb.allreduce(np.ones(2, np.float32), name="nm",
                                 process_set=ps),
            hx.InvalidArgumentError, "not a member of process set 1",
            "ranks 1, 2")
        if not isinstance(exc, ValueError):
            raise CaseFailure("not a ValueError")

    def mismatch():
        if not member:
            return
        shape = (2,) if ps.rank() == 0 else (3,)
        exc = expect_raises(
            lambda: hb.allreduce(np.ones(shape, np.float32), name="mm",
                                 process_set=ps),
            hx.MismatchError, "'mm'", "process set 1 (ranks 1, 2",
            "rank 1 sent [2]")
        if "rank 0" in str(exc):
            raise CaseFailure("names rank 0, not a member: %s" % exc)

    def root_outside():
        if not member:
            return
        expect_raises(lambda: hb.broadcast(np.ones(2), root_rank=0,
                                           name="root", process_set=ps),
                      hx.InvalidArgumentError, "root rank 0",
                      "not a member of process set 1")

    def global_splits():
        if not member:
            return
        expect_raises(lambda: hb.alltoall(np.ones(size), splits=[1] * size,
                                          name="sp", process_set=ps),
                      hx.InvalidArgumentError, "process set 1")

    def unregistered():
        expect_raises(lambda: hb.allreduce(np.ones(2), name="u",
                                           process_set=hb.ProcessSet([0])),
                      ValueError, "not registered")

    def still_works():
        if member:
            x = rank_data(seed("after"), rank, (4,), "float32")
            out = hb.allreduce(x, op=hb.Sum, name="after", process_set=ps)
            want = sum(rank_data(seed("after"), m, (4,), "float32")
                       .astype(np.float64) for m in members)
            assert_close(out, want.astype(np.float32), "float32", "after")
        hb.barrier()

    for name, fn in [("non-member", non_member), ("mismatch", mismatch),
                     ("root-outside", root_outside),
                     ("global-splits", global_splits),
                     ("unregistered", unregistered),
                     ("still-works", still_works)]:
        check.run("errors/" + name, fn)


def odd_ranks_comm():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    return world.Split(0 if world.rank % 2 else MPI.UNDEFINED, world.rank)


def dynamic(check: Checker, rank: int, size: int, how: str) -> None:
    if how == "init-dynamic":
        hb.init(process_sets="dynamic")
    else:
        hb.init()
    state = {}

    def add_and_use():
        ps = hb.add_process_set([size - 1, 0])
        state["ps"] = ps
        if ps.process_set_id != 1 or ps.ranks != [0, size - 1]:
            raise CaseFailure("added %s" % ps)
        if ps.included():
            x = rank_data(seed("dyn"), rank, (3,), "float64")
            out = hb.allreduce(x, op=hb.Sum, name="dyn", process_set=ps)
            want = (rank_data(seed("dyn"), 0, (3,), "float64") +
                    rank_data(seed("dyn"), size - 1, (3,), "float64"))
            assert_close(out, want, "float64", "allreduce on added set")
            if ps.rank() != (0 if rank == 0 else 1):
                raise CaseFailure("rank() %s" % ps.rank())
        else:
            expect_raises(ps.rank, ValueError, "not part")

    def duplicate():
        expect_raises(lambda: hb.add_process_set([0, size - 1]), ValueError,
                      "duplicate process set")

    def from_comm():
        ps = hb.add_process_set(odd_ranks_comm())
        odd = [r for r in range(size) if r % 2]
        state["comm"] = ps
        if ps.ranks != odd or ps.size() != len(odd):
            raise CaseFailure("communicator set %s" % ps)
        if rank in odd:
            out = hb.allgather(np.array([rank], np.int64), name="odd",
                               process_set=ps)
            if list(out) != odd:
                raise CaseFailure("allgather %s" % list(out))

    def disagree():
        mine = [0, 1] if rank == 0 else [0, size - 1]
        expect_raises(lambda: hb.add_process_set(mine), hx.MismatchError,
                      "disagree", "members")

    def remove():
        ps = state["ps"]
        if hb.remove_process_set(ps) is not True:
            raise CaseFailure("remove returned False")
        if ps.process_set_id is not None:
            raise CaseFailure("not invalidated")
        expect_raises(lambda: hb.allreduce(np.ones(1), process_set=ps),
                      ValueError, "not registered")
        if hb.remove_process_set(ps) is not False:
            raise CaseFailure("second remove")
        if hb.remove_process_set(hb.global_process_set) is not False:
            raise CaseFailure("removed the global set")
        ids = [p.process_set_id for p in hb.process_sets.process_sets()]
        if ids != [0, 2]:
            raise CaseFailure("ids after remove %s" % ids)
        again = hb.add_process_set([0, size - 1])
        if again.process_set_id != 3:
            raise CaseFailure("re-added as %s" % again)
        if again.included():
            out = hb.broadcast(np.full(2, rank, np.int32), root_rank=size - 1,
                               name="again", process_set=again)
            if list(out) != [size - 1] * 2:
                raise CaseFailure("broadcast %s" % list(out))

    for name, fn in [("add", add_and_use), ("duplicate", duplicate),
                     ("comm", from_comm), ("disagree", disagree),
                     ("remove", remove)]:
        check.run("dynamic/" + name, fn)
    hb.barrier()


def static(check: Checker, rank: int, size: int) -> None:
    by_comm = hb.ProcessSet(odd_ranks_comm())
    first_two = hb.ProcessSet([1, 0])
    hb.init(process_sets=[by_comm, first_two])
    odd = [r for r in range(size) if r % 2]

    def init_sets():
        if (by_comm.process_set_id, by_comm.ranks) != (1, odd):
            raise CaseFailure("communicator set %s" % by_comm)
        if (first_two.process_set_id, first_two.ranks) != (2, [0, 1]):
            raise CaseFailure("rank set %s" % first_two)
        for ps in (by_comm, first_two):
            if ps.included():
                x = rank_data(seed("st"), rank, (2,), "float32")
                out = hb.allreduce(x, op=hb.Average, name="st",
                                   process_set=ps)
                want = np.mean([rank_data(seed("st"), m, (2,), "float32")
                                .astype(np.float64) for m in ps.ranks], 0)
                assert_close(out, want.astype(np.float32), "float32", str(ps))

    def add_refused():
        exc = expect_raises(lambda: hb.add_process_set([0, 2]), ValueError,
                            "HOROVOD_DYNAMIC_PROCESS_SETS=1", "adding")
        if not isinstance(exc, hx.InvalidArgumentError):
            raise CaseFailure(type(exc).__name__)
        expect_raises(lambda: hb.remove_process_set(first_two), ValueError,
                      "HOROVOD_DYNAMIC_PROCESS_SETS=1", "removing")
        if first_two.process_set_id != 2:
            raise CaseFailure("refused removal invalidated the set")

    check.run("static/init-sets", init_sets)
    check.run("static/add-refused", add_refused)
    hb.barrier()


def stall(check: Checker, rank: int, size: int) -> None:
    ps = hb.ProcessSet([0, 1])
    hb.init(process_sets=[ps])

    def ends_with_error():
        # Members 0 and 1 submit different names: a stall inside the set.
        # The other ranks wait in join, which the stall check ignores, so
        # the set's stall is what ends the job.
        if rank in (0, 1):
            wait = lambda: hb.allreduce(np.ones(2), name="stuck%d" % rank,
                                        process_set=ps)
        else:
            wait = hb.join
        expect_raises(wait, hx.ShutdownError, "stalled",
                      "process set 1 (ranks 0, 1)")

    check.run("stall/every-rank-fails", ends_with_error)


def shutdown(check: Checker, rank: int, size: int) -> None:
    ps = hb.ProcessSet([1, 2])
    hb.init(process_sets=[ps])

    def pending_fails():
        if rank == 0:
            hb.shutdown()
            return
        # Pending for good whenever rank 0's shutdown arrives: the set's
        # two members ask for different names (one shared name could
        # complete inside the set before the shutdown reaches them), and
        # a global collective needs rank 0.
        on = ps if ps.included() else hb.global_process_set
        expect_raises(lambda: hb.allreduce(np.ones(1), name="never.%d" % rank,
                                           process_set=on),
                      hx.ShutdownError, "rank 0")

    check.run("shutdown/pending-fails", pending_fails)


def main() -> None:
    mode = sys.argv[1]
    rank, size = env_rank(), env_size()
    check = Checker(rank)
    if mode == "concurrent":
        concurrent(check, rank, size)
    elif mode == "errors":
        errors(check, rank, size)
    elif mode == "dynamic":
        dynamic(check, rank, size, sys.argv[2] if len(sys.argv) > 2 else "")
    elif mode == "static":
        static(check, rank, size)
    elif mode == "stall":
        stall(check, rank, size)
    elif mode == "shutdown":
        shutdown(check, rank, size)
    report({"ok": check.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
