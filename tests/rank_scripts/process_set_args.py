"""Rank script: add_process_set's checks of its rank list (numpy API).

    HB_DYNAMIC_PROCESS_SETS=1 hbrun -np N python process_set_args.py

Horovod 0.28.1 answers add_process_set([]) with ValueError ("Attempted to
add a duplicate process set": no ranks means every rank, the global set);
hbcore must raise ValueError too, on the calling rank alone and before
anything collective. To show that nothing collective started, only some
ranks make the bad calls; then every rank adds a valid set: had a bad call
queued a set operation, the ranks would disagree about that one (an error
on every rank) or wait for each other (the job's timeout).

Cases:
- empty_on_rank0: rank 0 alone: add_process_set([]) and
  add_process_set(ProcessSet([])) raise ValueError naming the empty list.
- out_of_range_on_last: the last rank alone: ranks [0, size] and [-1, 0]
  raise ValueError naming the rank and the range.
- repeated_everywhere: every rank: [0, 0] raises ValueError ("appears
  more than once").
- unknown_id_everywhere: every rank: a ProcessSet whose process_set_id
  is set by hand to an id no set has (10) makes allreduce raise
  ValueError naming the id when called, as Horovod's size() check does,
  before anything is submitted.
- valid_add_after: every rank adds [0, size - 1] ([1] at 2 ranks, where
  [0, 1] is the global set): it gets id 1 (no set was added before), the
  registered ids are [0, 1], and an allreduce on it gives the numpy sum of
  its members' values.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, assert_close, env_rank,  # noqa: E402
                    env_size, expect_raises, rank_data, report)

import hbcore as hb  # noqa: E402

CASES = ["empty_on_rank0", "out_of_range_on_last", "repeated_everywhere",
         "unknown_id_everywhere", "valid_add_after"]


def main() -> None:
    rank, size = env_rank(), env_size()
    hb.init()
    check = Checker(rank)

    def empty_on_rank0() -> None:
        if rank != 0:
            return
        expect_raises(lambda: hb.add_process_set([]), ValueError,
                      "duplicate process set", "empty rank list")
        expect_raises(lambda: hb.add_process_set(hb.ProcessSet([])),
                      ValueError, "duplicate process set", "ranks=[]")

    def out_of_range_on_last() -> None:
        if rank != size - 1:
            return
        expect_raises(lambda: hb.add_process_set([0, size]), ValueError,
                      "rank %d is not in [0, %d)" % (size, size))
        expect_raises(lambda: hb.add_process_set([-1, 0]), ValueError,
                      "rank -1 is not in [0, %d)" % size)

    def repeated_everywhere() -> None:
        expect_raises(lambda: hb.add_process_set([0, 0]), ValueError,
                      "rank 0 appears more than once")

    def unknown_id_everywhere() -> None:
        forged = hb.ProcessSet([0])
        forged.process_set_id = 10
        expect_raises(
            lambda: hb.allreduce(np.ones(2), name="forged", process_set=forged),
            ValueError, "no known process set with id 10")

    def valid_add_after() -> None:
        members = [0, size - 1] if size > 2 else [size - 1]
        ps = hb.add_process_set(list(reversed(members)))
        if ps.process_set_id != 1 or ps.ranks != members:
            raise CaseFailure("added %s" % ps)
        ids = [p.process_set_id for p in hb.process_sets.process_sets()]
        if ids != [0, 1]:
            raise CaseFailure("registered ids %s" % ids)
        if ps.included():
            x = rank_data(11, rank, (4,), "float64")
            out = hb.allreduce(x, op=hb.Sum, name="after_bad_adds",
                               process_set=ps)
            want = sum(rank_data(11, m, (4,), "float64") for m in members)
            assert_close(out, want, "float64", "allreduce on the added set")

    for name, fn in [("empty_on_rank0", empty_on_rank0),
                     ("out_of_range_on_last", out_of_range_on_last),
                     ("repeated_everywhere", repeated_everywhere),
                     ("unknown_id_everywhere", unknown_id_everywhere),
                     ("valid_add_after", valid_add_after)]:
        check.run(name, fn)
    # Members may still be in the set's allreduce: shutting down before
    # they finish would fail it.
    hb.barrier()
    report({"ok": check.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
