"""Rank script: the submission paths of hbcore._core, in one process.

    python submit_paths.py        (a singleton job; no launcher needed)

Single-tensor calls go through core.submit_one, groups through core.submit;
both share the C++ request preparation and the Handle type. The cases check
what those paths guarantee beyond the collectives' values (which
collectives.py checks at 2-3 ranks): every dtype on both paths, the
int()/float() conversion of numeric arguments, arrays kept alive by the
handle, wait() returning one result again and again, and the errors the
entry points raise for malformed calls.
"""
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DTYPE_NAMES, CaseFailure, Checker,  # noqa: E402
                    assert_close, dtype_of, expect_raises, rank_data, report)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402
from hbcore import ops  # noqa: E402


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CaseFailure(what)


def every_dtype_single() -> None:
    for i, dt in enumerate(DTYPE_NAMES):
        x = rank_data(i, 0, (3, 4), dt)
        y = x.copy()
        h = hb.allreduce_async_(y, op=hb.Sum, name="one.ip.%s" % dt)
        check(hb.synchronize(h) is y, "allreduce_async_ returns its tensor")
        assert_close(y, x, dt, "allreduce_ " + dt)
        assert_close(hb.allreduce(x, op=hb.Sum, name="one.%s" % dt), x, dt,
                     "allreduce " + dt)
        assert_close(hb.broadcast(x, 0, name="one.bc.%s" % dt), x, dt,
                     "broadcast " + dt)
        assert_close(hb.allgather(x, name="one.ag.%s" % dt), x, dt,
                     "allgather " + dt)
        out, received = hb.alltoall(x, splits=[3], name="one.a2a.%s" % dt)
        assert_close(out, x, dt, "alltoall " + dt)
        check(list(received) == [3], "alltoall received %s" % received)
        assert_close(hb.reducescatter(x, op=hb.Sum, name="one.rs.%s" % dt),
                     x, dt, "reducescatter " + dt)


def every_dtype_grouped() -> None:
    xs = [rank_data(i, 0, (5,), dt) for i, dt in enumerate(DTYPE_NAMES)]
    outs = hb.grouped_allreduce(xs, op=hb.Sum, name="grp")
    for x, out, dt in zip(xs, outs, DTYPE_NAMES):
        check(out.dtype == dtype_of(dt), "grouped dtype %s" % out.dtype)
        assert_close(out, x, dt, "grouped_allreduce " + dt)
    ys = [x.copy() for x in xs]
    check(hb.grouped_allreduce_(ys, op=hb.Sum, name="grp_") == ys,
          "grouped_allreduce_ returns its tensors")
    for x, out, dt in zip(xs, hb.grouped_allgather(xs, name="grp.ag"),
                          DTYPE_NAMES):
        assert_close(out, x, dt, "grouped_allgather " + dt)
    check(hb.grouped_allreduce([], name="grp.empty") == [],
          "an empty group returns an empty list")


def handle_results() -> None:
    x = np.arange(6, dtype=np.float32)
    h = hb.allreduce_async_(x, op=hb.Sum, name="h.ip")
    check(isinstance(h, hb.Handle), "handles are hbcore.Handle")
    first = hb.synchronize(h)
    check(first is x and hb.synchronize(h) is x, "wait() returns the tensor")
    check(hb.poll(h), "poll() after wait()")
    h = hb.allgather_async(x, name="h.ag")
    first = hb.synchronize(h)
    check(hb.synchronize(h) is first, "wait() returns one output every time")
    check(hb.synchronize(hb.allreduce_async(x, name="h.avg")).dtype == x.dtype,
          "allreduce_async output dtype")
    check(hb.barrier() is None, "barrier() returns None")
    check(hb.join() == 0, "join() returns the last rank")


def arrays_kept_alive() -> None:
    # The handle owns the only references to the arrays the core works on.
    handles = [hb.allreduce_async_(np.full(1 << 16, i, np.float64), op=hb.Sum,
                                   name="alive.ip.%d" % i) for i in range(8)]
    handles += [hb.allreduce_async(np.full(1 << 16, i, np.float64), op=hb.Sum,
                                   name="alive.%d" % i) for i in range(8)]
    gc.collect()
    for i, h in enumerate(handles):
        out = hb.synchronize(h)
        check(bool(np.all(out == i % 8)), "result %d changed" % i)


def numbers_converted() -> None:
    x = np.arange(4, dtype=np.float64)
    assert_close(hb.allreduce(x, op=1, name="num.op"), x, "float64", "op=1")
    assert_close(hb.allreduce(x, op=hb.Sum, name="num.scale",
                              prescale_factor=2,
                              postscale_factor=np.float32(0.5)),
                 x, "float64", "int and numpy scale factors")
    assert_close(hb.broadcast(x, np.int64(0), name="num.root"), x, "float64",
                 "numpy root rank")
    assert_close(hb.reducescatter(x, name="num.rs", op=np.int32(1)), x,
                 "float64", "numpy reduce op")
    expect_raises(lambda: hb.allreduce(x, op=hb.Sum, name="num.bad",
                                       prescale_factor="two"), ValueError)
    expect_raises(lambda: hb.broadcast(x, None, name="num.none"), TypeError)


def single_path_errors() -> None:
    expect_raises(lambda: hb.allreduce_async_(np.ones(3, np.complex64),
                                              name="err.dtype"),
                  hx.InvalidArgumentError, "complex64")
    expect_raises(lambda: hb.allreduce_async(np.ones(3, np.complex64),
                                             name="err.dtype"),
                  hx.InvalidArgumentError, "complex64")
    expect_raises(lambda: hb.allreduce_async_([1.0], name="err.list"),
                  hx.InvalidArgumentError, "allreduce_", "list")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    expect_raises(lambda: hb.allreduce_async_(ro, name="err.ro"),
                  hx.InvalidArgumentError, "writeable")
    expect_raises(lambda: hb.allreduce_async_(np.zeros((4, 4))[:, ::2],
                                              name="err.strided"),
                  hx.InvalidArgumentError, "contiguous")
    expect_raises(lambda: hb.allreduce_async_(np.zeros(2), name="",
                                              op=hb.Sum),
                  hx.InvalidArgumentError, "name")
    expect_raises(lambda: hb.allreduce_async_(np.zeros(2), name=7),
                  TypeError, "name")
    expect_raises(lambda: hb.allreduce_async_(np.zeros(2), name="err.ada",
                                              op=hb.Adasum),
                  hx.HbcoreError, "adasum")
    # A rejected request leaves nothing behind: the name is free again.
    x = np.ones(2)
    assert_close(hb.allreduce_(x, op=hb.Sum, name="err.ada"), np.ones(2),
                 "float64", "after a rejected request")


def grouped_path_errors() -> None:
    x = np.ones(2)
    expect_raises(lambda: hb.grouped_allreduce([x, np.ones(2, np.complex64)],
                                               name="gerr.dtype"),
                  hx.InvalidArgumentError, "complex64")
    expect_raises(lambda: hb.grouped_allreduce_([x, [1.0]], name="gerr.list"),
                  hx.InvalidArgumentError, "grouped_allreduce_")
    same = ops._request("gerr.same", 0, x, x.copy())
    expect_raises(lambda: ops._submit([same, same], ops._GIVEN),
                  hx.DuplicateNameError, "gerr.same")
    # Nothing of the rejected group stays in flight.
    check(hb.grouped_allreduce([x, x], op=hb.Sum, name="gerr.dtype")[0][0] == 1,
          "group after a rejected group")


def malformed_core_calls() -> None:
    core = ops.core
    x = np.ones(2)
    expect_raises(lambda: core.submit_one("m", 0, 1, x, x), TypeError)
    expect_raises(lambda: core.submit_one("m", 0, 1, [1.0], x, 0, 1.0, 1.0,
                                          None, False, 0, x), TypeError)
    expect_raises(lambda: core.submit((), 0), TypeError)
    expect_raises(lambda: core.submit([("m", 0)], 0), ValueError)
    expect_raises(lambda: core.Handle(), TypeError)


CASES = [("single/every-dtype", every_dtype_single),
         ("grouped/every-dtype", every_dtype_grouped),
         ("handle/results", handle_results),
         ("handle/keeps-arrays-alive", arrays_kept_alive),
         ("single/numbers-converted", numbers_converted),
         ("single/errors", single_path_errors),
         ("grouped/errors", grouped_path_errors),
         ("core/malformed-calls", malformed_core_calls)]


def main() -> None:
    hb.init()
    checker = Checker(rank=0)
    for name, fn in CASES:
        checker.run(name, fn)
    hb.shutdown()
    report({"ok": checker.all_ok})


if __name__ == "__main__":
    main()
