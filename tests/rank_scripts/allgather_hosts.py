"""Rank script: allgathers across emulated hosts, compared byte for byte
with numpy's concatenation of every rank's rank-seeded data (computed here
for every rank, never by hbcore).

    allgather_hosts.py numpy   # dtypes, uneven and zero first dims, grouped
    allgather_hosts.py tf      # the same through hbcore_tf, once

Whether the hierarchical path or the flat MPI one serves the calls is the
test's choice (HB_HIERARCHICAL_ALLGATHER); the expected bytes are the same.
"""
import os
import sys
from typing import List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CaseFailure, Checker, rank_data, report  # noqa: E402

DTYPES = ["uint8", "int8", "int64", "float16", "bfloat16", "float32",
          "float64", "bool"]
ROW_SHAPES = ((0, (3, 2)), (1, ()), (2, (5,)), (3, (2,)))
NUMPY_CASES = (["allgather/%s/case%d" % (dt, case) for dt in DTYPES
                for case, _ in ROW_SHAPES]
               + ["allgather/large", "allgather/grouped",
                  "allgather/async-repeated"])
TF_CASES = ["tf/allgather"]


def rows_of(case: int, rank: int, size: int) -> int:
    """First dimension of `rank` in case `case`: uneven, with zero rows on
    some ranks (never on all of them)."""
    if case == 0:
        return (3, 0, 5, 1, 2)[rank % 5]
    if case == 1:  # only the last rank has rows
        return 4 if rank == size - 1 else 0
    if case == 2:  # only rank 0
        return 2 if rank == 0 else 0
    return rank + 1


def inputs(seed: int, case: int, size: int, row_shape, dtype: str
           ) -> List[np.ndarray]:
    return [rank_data(seed, r, (rows_of(case, r, size),) + tuple(row_shape),
                      dtype) for r in range(size)]


def check_equal(got, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    if got.dtype != want.dtype or got.shape != want.shape:
        raise CaseFailure("%s: got %s %s, want %s %s" % (
            what, got.dtype, got.shape, want.dtype, want.shape))
    if got.tobytes() != want.tobytes():
        bad = np.nonzero(got.reshape(-1).view(np.uint8)
                         != want.reshape(-1).view(np.uint8))[0]
        raise CaseFailure("%s: %d bytes differ, first at byte %d" % (
            what, bad.size, bad[0]))


def numpy_cases(checker: Checker) -> None:
    import hbcore as hb
    hb.init()
    rank, size = hb.rank(), hb.size()
    for i, dtype in enumerate(DTYPES):
        for case, row_shape in ROW_SHAPES:
            name = "allgather/%s/case%d" % (dtype, case)

            def one(dtype=dtype, case=case, row_shape=row_shape, name=name):
                x = inputs(100 * i + case, case, size, row_shape, dtype)
                check_equal(hb.allgather(x[rank], name=name),
                            np.concatenate(x), name)
            checker.run(name, one)

    def large():
        # Several MB, uneven: MPI's large-message protocols on every step.
        x = [rank_data(7, r, ((r + 1) * 40000 + r, 3), "float32")
             for r in range(size)]
        check_equal(hb.allgather(x[rank], name="allgather.large"),
                    np.concatenate(x), "large")
    checker.run("allgather/large", large)

    def grouped():
        specs = [("float32", (4,), 0), ("int8", (), 1), ("bool", (2, 2), 3),
                 ("float64", (3,), 2)]
        xs = [inputs(50 + j, case, size, shape, dt)
              for j, (dt, shape, case) in enumerate(specs)]
        outs = hb.grouped_allgather([x[rank] for x in xs],
                                    name="grouped.allgather")
        if len(outs) != len(xs):
            raise CaseFailure("grouped_allgather gave %d outputs" % len(outs))
        for j, (out, x) in enumerate(zip(outs, xs)):
            check_equal(out, np.concatenate(x), "grouped[%d]" % j)
    checker.run("allgather/grouped", grouped)

    def repeated_async():
        # Several in flight at once, then the same names again (response
        # cache hits take the same backend path).
        for round_ in range(2):
            xs = [inputs(200 + k, k % 4, size, (k + 1,), "int32")
                  for k in range(6)]
            handles = [hb.allgather_async(x[rank], name="async.%d" % k)
                       for k, x in enumerate(xs)]
            for k, (h, x) in enumerate(zip(handles, xs)):
                check_equal(hb.synchronize(h), np.concatenate(x),
                            "round %d async %d" % (round_, k))
    checker.run("allgather/async-repeated", repeated_async)
    report({"rank": rank, "size": size, "local_size": hb.local_size(),
            "cross_size": hb.cross_size()})
    hb.shutdown()


def tf_cases(checker: Checker) -> None:
    import hbcore_tf as hvd
    import tensorflow as tf
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    def tf_allgather():
        for dtype in ("float32", "int64"):
            x = inputs(300, 0, size, (3,), dtype)
            got = hvd.allgather(tf.constant(x[rank]), name="tf.ag." + dtype)
            check_equal(got.numpy(), np.concatenate(x), "tf " + dtype)
    checker.run("tf/allgather", tf_allgather)
    report({"rank": rank, "size": size})
    hvd.shutdown()


def main() -> None:
    checker = Checker()
    if sys.argv[1] == "tf":
        tf_cases(checker)
    else:
        numpy_cases(checker)


if __name__ == "__main__":
    main()
