"""Rank script: allreduces that go through the executor's pipeline (the
flat MPI path of jobs across hosts without the hierarchical path), and lone
large tensors sharing a cycle with them.

Cases (every result checked against numpy from every rank's recomputed,
rank-seeded data):
  fused-group     hb.grouped_allreduce of 12 tensors just under 1 MiB
                  (one ~12 MiB batch, 3 pieces), prescale and postscale.
  multi-piece     a burst of async allreduces of 12 tensors just under 1 MiB:
                  fused into one batch of ~12 MiB, packed and reduced in 3
                  pieces through the two fusion buffers; float32 Sum with
                  prescale / postscale on some tensors, and int32 Average.
  mixed           one grouped call mixing fused small tensors and lone
                  tensors of 2 and 3 MiB (several batches in flight).
  half            float16 multi-piece Sum.
  lone-burst      five 2 MiB allreduces submitted async, then synchronized,
                  in reverse order on odd ranks.
  joined          rank 0 joins at once while the others reduce 2 MiB
                  tensors: the result sums the other ranks only.
  lone-dtypes     lone tensors of 256 Ki elements (over the size at which
                  a lone tensor reduces in node shared memory on one host,
                  fusion.h) of every kind of dtype with every reduce op,
                  in place and out of place.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, all_rank_data, assert_close,  # noqa: E402
                    env_rank, reduce_expected, report)

import hbcore as hb  # noqa: E402

MIB = 1 << 20
JUST_UNDER = (MIB - 64) // 4      # float32 elements that still fuse


def grouped_case(seed, dtype, specs, op_name):
    """specs: [(elements, prescale, postscale)]; one grouped allreduce."""
    size, rank = hb.size(), hb.rank()
    op = getattr(hb, op_name)
    inputs = [all_rank_data(seed + i, size, (n,), dtype)
              for i, (n, _, _) in enumerate(specs)]
    outs = []
    for i, (_, pre, post) in enumerate(specs):
        outs.append(hb.allreduce_async(
            inputs[i][rank], op=op, name="pipe.%d.%d" % (seed, i),
            prescale_factor=pre, postscale_factor=post))
    for i, (handle, (_, pre, post)) in enumerate(zip(outs, specs)):
        got = hb.synchronize(handle)
        assert_close(got, reduce_expected(inputs[i], dtype, op_name, pre, post),
                     dtype, "tensor %d" % i)


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)

    def fused_group():
        # grouped_allreduce negotiates and fuses its tensors together.
        inputs = [all_rank_data(20 + i, size, (JUST_UNDER,), "float32")
                  for i in range(12)]
        outs = hb.grouped_allreduce([x[rank] for x in inputs], op=hb.Sum,
                                    prescale_factor=0.5, postscale_factor=3.0,
                                    name="pipe.group")
        for i, got in enumerate(outs):
            assert_close(got, reduce_expected(inputs[i], "float32", "Sum",
                                              0.5, 3.0), "float32",
                         "group tensor %d" % i)
    checker.run("pipeline/fused-group", fused_group)
    checker.run("pipeline/multi-piece", lambda: (
        grouped_case(10, "float32",
                     [(JUST_UNDER, 0.5 if i % 3 == 0 else 1.0,
                       2.0 if i % 4 == 1 else 1.0) for i in range(12)], "Sum"),
        grouped_case(40, "int32", [(JUST_UNDER, 1.0, 1.0)] * 12, "Average")))
    checker.run("pipeline/mixed", lambda: grouped_case(
        60, "float32",
        [(1000, 1.0, 1.0), (2 * MIB // 4, 1.0, 1.0), (5000, 1.0, 1.0),
         (3 * MIB // 4, 0.25, 1.0), (7, 1.0, 1.0)], "Average"))
    checker.run("pipeline/half", lambda: grouped_case(
        80, "float16", [(2 * JUST_UNDER, 1.0, 1.0)] * 5, "Sum"))

    def lone_burst():
        inputs = [all_rank_data(100 + i, size, (MIB // 2,), "float32")
                  for i in range(5)]
        order = list(range(5)) if rank % 2 == 0 else list(reversed(range(5)))
        handles = {i: hb.allreduce_async(inputs[i][rank], op=hb.Sum,
                                         name="burst.%d" % i) for i in order}
        for i in range(5):
            assert_close(hb.synchronize(handles[i]),
                         reduce_expected(inputs[i], "float32", "Sum"),
                         "float32", "burst %d" % i)
    checker.run("pipeline/lone-burst", lone_burst)

    def joined():
        inputs = [all_rank_data(200 + i, size, (MIB // 2,), "float32")
                  for i in range(3)]
        if rank == 0:
            last = hb.join()
        else:
            handles = [hb.allreduce_async(inputs[i][rank], op=hb.Sum,
                                          name="joined.%d" % i)
                       for i in range(3)]
            for i, h in enumerate(handles):
                expected = reduce_expected(inputs[i][1:], "float32", "Sum")
                assert_close(hb.synchronize(h), expected, "float32",
                             "joined %d" % i)
            last = hb.join()
        if last == 0 and size > 1:
            raise CaseFailure("rank 0 joined first but join() says it was last")
    checker.run("pipeline/joined", joined)

    def lone_dtypes():
        n = 256 * 1024
        for k, (dtype, ops) in enumerate([
                ("float32", ["Average", "Sum", "Min", "Max", "Product"]),
                ("float16", ["Sum", "Max"]), ("float64", ["Min"]),
                ("int8", ["Sum", "Min", "Product"]), ("int32", ["Average"]),
                ("uint8", ["Max"]), ("bool", ["Sum", "Min"])]):
            for j, op in enumerate(ops):
                kind = "positive" if op == "Product" else "any"
                inputs = all_rank_data(300 + 10 * k + j, size, (n,), dtype,
                                       kind)
                expected = reduce_expected(inputs, dtype, op)
                what = "lone %s %s" % (dtype, op)
                got = hb.allreduce(inputs[rank], op=getattr(hb, op),
                                   name="lone.%s.%s" % (dtype, op))
                assert_close(got, expected, dtype, what)
                x = inputs[rank].copy()
                hb.allreduce_(x, op=getattr(hb, op),
                              name="lone_.%s.%s" % (dtype, op))
                assert_close(x, expected, dtype, what + " in place")
    checker.run("pipeline/lone-dtypes", lone_dtypes)

    hb.barrier()
    report({"ok": checker.all_ok}, rank)
    hb.shutdown()


if __name__ == "__main__":
    main()
