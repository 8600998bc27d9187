"""Rank script: ``Handle.wait(timeout=...)`` and ``synchronize(h, timeout=...)``.

    hbrun -np N python wait_timeout.py

In every case the last rank withholds its submission until every other
rank has seen its wait time out (a marker-file handshake, no sleeps), so
the timeout is certain; then it submits, and every rank's later wait must
return the full result: a timeout cancels nothing.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, all_rank_data,  # noqa: E402
                    assert_close, await_peers, env_rank, expect_raises,
                    reduce_expected, report, signal_peers)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402


def handshake(case, submit, check_timeout, check_result):
    """Ranks other than the last submit, see wait time out, signal; the
    last rank waits for their markers, then submits; all check the result.
    """
    rank, size = hb.rank(), hb.size()
    late = size - 1
    if rank != late:
        handle = submit()
        check_timeout(handle)
        signal_peers("%s.%d" % (case, rank))
    else:
        await_peers(["%s.%d" % (case, r) for r in range(size - 1)])
        handle = submit()
    check_result(handle)


def expect_timeout(handle, *fragments, timeout=0.05):
    """wait(timeout) raises WaitTimeoutError (a TimeoutError and an
    HbcoreError) whose message has every fragment; poll stays False."""
    exc = expect_raises(lambda: handle.wait(timeout=timeout),
                        hx.WaitTimeoutError, "still in flight", *fragments)
    if not isinstance(exc, TimeoutError) or not isinstance(exc,
                                                          hb.HbcoreError):
        raise CaseFailure("WaitTimeoutError is not a TimeoutError and an "
                          "HbcoreError: %s" % type(exc).__mro__)
    # The positional form, synchronize and timeout=0 behave the same.
    expect_raises(lambda: handle.wait(0), TimeoutError)
    expect_raises(lambda: hb.synchronize(handle, timeout=0.01),
                  hx.WaitTimeoutError, *fragments)
    if hb.poll(handle):
        raise CaseFailure("poll() True although the last rank has not "
                          "submitted")


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker()

    def single():
        x = all_rank_data(11, size, (5,), "float32")
        expected = reduce_expected(x, "float32", "Sum")

        def check_result(h):
            if rank == size - 1:  # it submitted last: a long timeout is met
                out = h.wait(timeout=60)
            else:
                out = hb.synchronize(h)
            assert_close(out, expected, "float32", "after the timeout")
            if h.wait() is not out or hb.synchronize(h, timeout=0) is not out:
                raise CaseFailure("a later wait did not return the result")
        handshake("single",
                  lambda: hb.allreduce_async(x[rank], name="wt.single",
                                             op=hb.Sum),
                  lambda h: expect_timeout(h, "'wt.single'"), check_result)
    checker.run("single", single)

    def group():
        xs = [all_rank_data(20 + i, size, (i + 2, 3), "int64")
              for i in range(3)]

        def check_result(h):
            outs = hb.synchronize(h)
            for i, out in enumerate(outs):
                assert_close(out, reduce_expected(xs[i], "int64", "Sum"),
                             "int64", "group tensor %d" % i)
        handshake("group",
                  lambda: hb.grouped_allreduce_async(
                      [x[rank] for x in xs], name="wt.group", op=hb.Sum),
                  lambda h: expect_timeout(h, "group of 3 tensors",
                                           "'wt.group.0'"),
                  check_result)
    checker.run("group", group)

    def core_allocated_output():
        # allgather's output is allocated by the core and handed over once.
        x = [np.full((r + 1, 2), r, np.int32) for r in range(size)]

        def check_result(h):
            out = h.wait()
            assert_close(out, np.concatenate(x), "int32", "allgather")
            if h.wait() is not out:
                raise CaseFailure("second wait built another result")
        handshake("allgather",
                  lambda: hb.allgather_async(x[rank], name="wt.gather"),
                  lambda h: expect_timeout(h, "'wt.gather'"), check_result)
    checker.run("allgather", core_allocated_output)

    def error_after_timeout():
        # The last rank submits another shape: the error reaches the waits
        # that timed out before.
        shape = (4,) if rank != size - 1 else (5,)

        def check_result(h):
            for _ in range(2):  # raised again on every wait
                expect_raises(lambda: hb.synchronize(h), hx.MismatchError,
                              "wt.mismatch")
        handshake("mismatch",
                  lambda: hb.allreduce_async(np.ones(shape, np.float32),
                                             name="wt.mismatch"),
                  lambda h: expect_timeout(h, "'wt.mismatch'"), check_result)
    checker.run("mismatch", error_after_timeout)

    def bad_timeouts():
        h = hb.allreduce_async(np.ones(2), name="wt.bad", op=hb.Sum)
        for bad in (-1, float("nan"), float("inf")):
            expect_raises(lambda bad=bad: h.wait(timeout=bad), ValueError,
                          "timeout")
        expect_raises(lambda: h.wait("soon"), TypeError)
        expect_raises(lambda: h.wait(timeout=1, extra=2), TypeError)
        out = h.wait(timeout=None)
        assert_close(out, np.full(2, size, np.float64), "float64",
                     "wait(timeout=None)")
    checker.run("bad-timeouts", bad_timeouts)

    hb.shutdown()
    report({"ok": checker.all_ok, "cases": checker.results}, rank)


if __name__ == "__main__":
    main()
