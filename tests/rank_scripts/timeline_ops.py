"""Rank script: a few collectives while a timeline is written.

    HB_TIMELINE=tl.json hbrun -np N python timeline_ops.py
    hbrun -np N --timeline-filename tl.json python timeline_ops.py

Runs: one allreduce ('tl.single'), a grouped allreduce of 3 tensors
('tl.group.0..2', fused: they are negotiated together), 3 async allreduces
('tl.async.0..2'), an allgather ('tl.gather') and a broadcast ('tl.bcast'),
checks the results, shuts down (which closes the timeline) and reports.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Checker, all_rank_data, assert_close, env_rank,  # noqa: E402
                    rank_data, reduce_expected, report)

import hbcore as hb  # noqa: E402


def main() -> None:
    rank = env_rank()
    checker = Checker(rank)
    hb.init()
    size = hb.size()

    def ops():
        x = all_rank_data(1, size, (16,), "float32")
        assert_close(hb.allreduce(x[rank], name="tl.single", op=hb.Sum),
                     reduce_expected(x, "float32", "Sum"), "float32", "single")
        group = [all_rank_data(10 + i, size, (8,), "float32") for i in range(3)]
        outs = hb.grouped_allreduce([g[rank] for g in group], name="tl.group",
                                    op=hb.Sum)
        for g, o in zip(group, outs):
            assert_close(o, reduce_expected(g, "float32", "Sum"), "float32",
                         "group")
        handles = [hb.allreduce_async(x[rank] * i, name="tl.async.%d" % i,
                                      op=hb.Sum) for i in range(3)]
        for i, h in enumerate(handles):
            assert_close(hb.synchronize(h),
                         reduce_expected(x, "float32", "Sum") * i, "float32",
                         "async")
        rows = [rank_data(2, r, (r + 1, 3), "int32") for r in range(size)]
        assert_close(hb.allgather(rows[rank], name="tl.gather"),
                     np.concatenate(rows), "int32", "gather")
        b = all_rank_data(3, size, (5,), "float64")
        assert_close(hb.broadcast(b[rank], 0, name="tl.bcast"), b[0],
                     "float64", "bcast")
    checker.run("timeline/ops", ops)
    hb.shutdown()
    report({"ok": checker.all_ok}, rank)


if __name__ == "__main__":
    main()
