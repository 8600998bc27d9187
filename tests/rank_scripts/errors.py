"""Rank script: errors, checked by exception type and message on every rank.

    hbrun -np N python errors.py

Cases "local/..." are raised on this rank before any communication (every
rank makes the same bad call, so no rank waits for another). Cases
"mismatch/..." are cross-rank disagreements (rank 0 differs from the
others): every rank must raise MismatchError naming the tensor, the ranks
and what differed, and a following allreduce must still be right.
"""
import os
import re
import sys
import threading
import time
from typing import Callable, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, all_rank_data, assert_close,  # noqa: E402
                    env_rank, expect_raises, rank_data, reduce_expected,
                    report)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402

Case = Tuple[str, Callable[[], None]]


def ranks_named(message: str) -> List[int]:
    """Every rank number the message mentions after 'rank'/'ranks'
    ('rank 0 sent ...; ranks 1, 2 sent ...', 'ranks [1, 2]', ...)."""
    found = set()
    for m in re.finditer(r"\branks?\s*[\[(]?\s*((?:\d+\s*(?:,|and)?\s*)+)",
                         message, re.IGNORECASE):
        found.update(int(x) for x in re.findall(r"\d+", m.group(1)))
    return sorted(found)


def still_works(rank: int, size: int, tag: str) -> None:
    inputs = all_rank_data(hash_seed(tag), size, (5,), "float32")
    out = hb.allreduce(inputs[rank], name="after." + tag, op=hb.Sum)
    assert_close(out, reduce_expected(inputs, "float32", "Sum"), "float32",
                 "allreduce after " + tag)


def hash_seed(text: str) -> int:
    import zlib
    return zlib.crc32(text.encode())


def check_mismatch(exc: BaseException, name: str, size: int,
                   *fragments: str) -> None:
    """The mismatch error names the tensor, every rank, and what differed."""
    if type(exc) is not hx.MismatchError:
        raise CaseFailure("expected MismatchError, got %s: %s"
                          % (type(exc).__name__, exc))
    message = str(exc)
    if name not in message:
        raise CaseFailure("message does not name tensor %r: %r"
                          % (name, message))
    named = ranks_named(message)
    if named != list(range(size)):
        raise CaseFailure("message names ranks %s, expected all of %s "
                          "(rank 0 differs from the others): %r"
                          % (named, list(range(size)), message))
    missing = [f for f in fragments if f.lower() not in message.lower()]
    if missing:
        raise CaseFailure("message lacks %r: %r" % (missing, message))


def mismatch_cases(rank: int, size: int) -> List[Case]:
    odd = rank == 0  # rank 0 asks for something else than the others
    cases: List[Case] = []

    def run(name: str, submit: Callable[[], object], *fragments: str):
        def fn():
            try:
                submit()
            except Exception as exc:  # noqa: BLE001
                check_mismatch(exc, name, size, *fragments)
            else:
                raise CaseFailure("no error raised")
            still_works(rank, size, name)
        cases.append(("mismatch/" + name.split(".", 1)[1], fn))

    x3 = np.arange(3, dtype=np.float32)
    x4 = np.arange(4, dtype=np.float32)
    run("mm.shape", lambda: hb.allreduce(x3 if odd else x4, name="mm.shape"),
        "shape", "3", "4")
    run("mm.dtype", lambda: hb.allreduce(
        np.ones(4, np.float32 if odd else np.float64), name="mm.dtype"),
        "float32", "float64")
    run("mm.optype", lambda: (
        hb.allreduce(x4, name="mm.optype") if odd
        else hb.allgather(x4, name="mm.optype")), "allreduce", "allgather")
    run("mm.root", lambda: hb.broadcast(x4, 0 if odd else 1, name="mm.root"),
        "root")
    run("mm.reduceop", lambda: hb.allreduce(
        x4, name="mm.reduceop", op=hb.Sum if odd else hb.Max), "sum", "max")
    run("mm.prescale", lambda: hb.allreduce(
        x4, name="mm.prescale", op=hb.Sum,
        prescale_factor=1.0 if odd else 2.0), "prescale", "2")
    run("mm.postscale", lambda: hb.allreduce(
        x4, name="mm.postscale", op=hb.Sum,
        postscale_factor=3.0 if odd else 1.0), "postscale", "3")
    run("mm.gather-trailing", lambda: hb.allgather(
        np.ones((2, 3) if odd else (2, 5), np.int32),
        name="mm.gather-trailing"), "shape")
    run("mm.bcast-shape", lambda: hb.broadcast(
        x3 if odd else x4, 1, name="mm.bcast-shape"), "shape")
    run("mm.rs-shape", lambda: hb.reducescatter(
        np.ones((2 * size + (1 if odd else 0), 2), np.float32),
        name="mm.rs-shape", op=hb.Sum), "shape")
    run("mm.rs-op", lambda: hb.reducescatter(
        np.ones((size, 2), np.float32), name="mm.rs-op",
        op=hb.Sum if odd else hb.Average), "sum", "average")
    run("mm.a2a-trailing", lambda: hb.alltoall(
        np.ones((size, 2 if odd else 3), np.float32),
        name="mm.a2a-trailing"), "shape")

    def cached():
        # The same name first agrees (its response is cached), then rank 0
        # changes the shape: the cached response must not be used.
        name = "mm.cached"
        for _ in range(3):
            out = hb.allreduce(np.full(4, rank, np.float64), name=name,
                               op=hb.Sum)
            assert_close(out, np.full(4, float(sum(range(size)))), "float64",
                         "agreeing rounds")
        try:
            hb.allreduce(np.ones(6 if odd else 4), name=name, op=hb.Sum)
        except Exception as exc:  # noqa: BLE001
            check_mismatch(exc, name, size, "shape")
        else:
            raise CaseFailure("no error after the cached shape changed")
        out = hb.allreduce(np.full(4, rank, np.float64), name=name, op=hb.Sum)
        assert_close(out, np.full(4, float(sum(range(size)))), "float64",
                     "agreeing again")
        still_works(rank, size, name)
    cases.append(("mismatch/cached-then-changed", cached))

    def in_fused_batch():
        # A mismatched tensor among good ones submitted together: only it
        # fails.
        good = [all_rank_data(hash_seed("fb%d" % i), size, (3,), "float32")
                for i in range(2)]
        h0 = hb.allreduce_async(good[0][rank], name="mm.fb.good0", op=hb.Sum)
        hbad = hb.allreduce_async(x3 if odd else x4, name="mm.fb.bad",
                                  op=hb.Sum)
        h1 = hb.allreduce_async(good[1][rank], name="mm.fb.good1", op=hb.Sum)
        try:
            hb.synchronize(hbad)
        except Exception as exc:  # noqa: BLE001
            check_mismatch(exc, "mm.fb.bad", size, "shape")
        else:
            raise CaseFailure("no error for the mismatched tensor")
        for i, h in enumerate((h0, h1)):
            assert_close(hb.synchronize(h),
                         reduce_expected(good[i], "float32", "Sum"),
                         "float32", "good tensor %d" % i)
    cases.append(("mismatch/in-fused-batch", in_fused_batch))

    def grouped():
        xs = [np.ones(3, np.float32), np.ones(2 if odd else 5, np.float32)]
        try:
            hb.grouped_allreduce(xs, name="mm.grouped", op=hb.Sum)
        except hx.MismatchError as exc:
            if "mm.grouped" not in str(exc):
                raise CaseFailure("message does not name the group: %s" % exc)
        except Exception as exc:  # noqa: BLE001
            raise CaseFailure("expected MismatchError, got %s: %s"
                              % (type(exc).__name__, exc))
        else:
            raise CaseFailure("no error raised")
        still_works(rank, size, "mm.grouped")
    cases.append(("mismatch/grouped", grouped))
    return cases


def local_cases(rank: int, size: int) -> List[Case]:
    cases: List[Case] = []
    x = np.arange(2 * size, dtype=np.float32)

    def duplicate():
        # Rank by rank: rank `turn` submits its tensor before the others do,
        # so it cannot complete (and free its name) while that rank checks
        # the duplicates; the barrier then releases the others to submit.
        for turn in range(size):
            name = "dup.%d" % turn
            if rank == turn:
                h = hb.allreduce_async(x, name=name, op=hb.Sum)
                exc = expect_raises(lambda: hb.allreduce_async(x, name=name),
                                    hx.DuplicateNameError, name)
                if not isinstance(exc, hx.InvalidArgumentError):
                    raise CaseFailure("DuplicateNameError is not an "
                                      "InvalidArgumentError")
                # Another op type with the in-flight name is a duplicate too.
                expect_raises(lambda: hb.allgather(x, name=name),
                              hx.DuplicateNameError, name)
                hb.barrier()
            else:
                hb.barrier()
                h = hb.allreduce_async(x, name=name, op=hb.Sum)
            assert_close(hb.synchronize(h), x * size, "float32",
                         "first '%s'" % name)
            # Once finished the name is free again.
            assert_close(hb.allreduce(x, name=name, op=hb.Sum), x * size,
                         "float32", "'%s' reused after it finished" % name)
    cases.append(("local/duplicate-name", duplicate))

    def two_waiters():
        # Two threads wait on one unfinished allgather (the peers submit it
        # only after the barrier): both must get the same output array.
        want = np.concatenate([x] * size)
        name = "two.waiters"
        if rank == 0:
            h = hb.allgather_async(x, name=name)
            started = [threading.Event(), threading.Event()]
            got = [None, None]

            def wait(i):
                started[i].set()
                got[i] = hb.synchronize(h)

            threads = [threading.Thread(target=wait, args=(i,))
                       for i in range(2)]
            for t in threads:
                t.start()
            for e in started:
                e.wait(30)
            hb.barrier()
            for t in threads:
                t.join(60)
            if got[0] is None or got[1] is not got[0]:
                raise CaseFailure("waiters got different results: %r, %r"
                                  % (type(got[0]), type(got[1])))
            assert_close(got[0], want, "float32", "allgather of two waiters")
        else:
            hb.barrier()
            assert_close(hb.allgather(x, name=name), want, "float32",
                         "allgather")
    cases.append(("local/two-waiters-one-result", two_waiters))

    def empty_name():
        expect_raises(lambda: hb.allgather(x, name=""),
                      hx.InvalidArgumentError, "name")
    cases.append(("local/empty-name", empty_name))

    def bad_root():
        for root in (-1, size):
            for fn in (lambda: hb.broadcast(x, root, name="badroot"),
                       lambda: hb.broadcast_(x.copy(), root, name="badroot"),
                       lambda: hb.broadcast_object({"a": 1}, root_rank=root,
                                                   name="badroot.obj")):
                expect_raises(fn, hx.InvalidArgumentError, "root",
                              str(root))
    cases.append(("local/invalid-root", bad_root))

    def bad_splits():
        n = x.shape[0]
        expect_raises(lambda: hb.alltoall(x, splits=[n + 1] + [0] * (size - 1),
                                          name="a2a.sum"),
                      hx.InvalidArgumentError, "split", str(n + 1))
        expect_raises(lambda: hb.alltoall(x, splits=[n] + [0] * size,
                                          name="a2a.len"),
                      hx.InvalidArgumentError, "split", str(size + 1))
        expect_raises(lambda: hb.alltoall(x, splits=[n], name="a2a.len1"),
                      hx.InvalidArgumentError, "split")
        neg = [0] * size
        neg[0], neg[-1] = n + 1, -1
        expect_raises(lambda: hb.alltoall(x, splits=neg, name="a2a.neg"),
                      hx.InvalidArgumentError, "split")
        uneven = np.arange(size + 1, dtype=np.float32)
        expect_raises(lambda: hb.alltoall(uneven, name="a2a.uneven"),
                      hx.InvalidArgumentError, str(size + 1))
    cases.append(("local/alltoall-splits", bad_splits))

    def adasum():
        for fn in (lambda: hb.allreduce(x, name="ada", op=hb.Adasum),
                   lambda: hb.allreduce_(x.copy(), name="ada_", op=hb.Adasum),
                   lambda: hb.reducescatter(x, name="ada.rs", op=hb.Adasum)):
            exc = expect_raises(fn, hx.UnsupportedError, "adasum")
            if not isinstance(exc, NotImplementedError):
                raise CaseFailure("UnsupportedError is not a "
                                  "NotImplementedError")
    cases.append(("local/adasum", adasum))

    def bad_dtype():
        for arr in (np.ones(3, np.complex64), np.array(["a", "b"])):
            for fn in (lambda: hb.allreduce(arr, name="cplx"),
                       lambda: hb.allgather(arr, name="cplx"),
                       lambda: hb.broadcast(arr, 0, name="cplx"),
                       lambda: hb.alltoall(np.resize(arr, size), name="cplx")):
                expect_raises(fn, hx.InvalidArgumentError, str(arr.dtype))
    cases.append(("local/unsupported-dtype", bad_dtype))

    def scalars():
        s = np.float32(3.0)
        expect_raises(lambda: hb.allgather(s, name="sc.ag"),
                      hx.InvalidArgumentError)
        expect_raises(lambda: hb.alltoall(s, name="sc.a2a"),
                      hx.InvalidArgumentError)
        expect_raises(lambda: hb.reducescatter(s, name="sc.rs"),
                      hx.InvalidArgumentError)
    cases.append(("local/scalar-needs-a-dimension", scalars))

    def inplace_needs_array():
        expect_raises(lambda: hb.allreduce_([1.0, 2.0], name="ip.list"),
                      hx.InvalidArgumentError)
        strided = np.zeros((4, 4), np.float32)[:, ::2]
        expect_raises(lambda: hb.allreduce_(strided, name="ip.strided"),
                      hx.InvalidArgumentError, "contiguous")
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        expect_raises(lambda: hb.broadcast_(ro, 0, name="ip.ro"),
                      hx.InvalidArgumentError)
    cases.append(("local/inplace-needs-writeable-array", inplace_needs_array))

    def unpicklable_object():
        # A lock cannot be pickled: the rank holding it raises pickling's
        # own TypeError, every other rank a TypeError naming that rank; no
        # rank is left waiting for the others.
        lock = threading.Lock()
        exc = expect_raises(
            lambda: hb.broadcast_object(lock if rank == 0 else None, 0,
                                        name="obj.lock.bcast"),
            TypeError, "pickle")
        if rank != 0 and "rank 0" not in str(exc):
            raise CaseFailure("the error does not name rank 0: %s" % exc)
        last = size - 1
        exc = expect_raises(
            lambda: hb.allgather_object(lock if rank == last else rank,
                                        name="obj.lock.gather"),
            TypeError, "pickle")
        if rank != last and "rank %d" % last not in str(exc):
            raise CaseFailure("the error does not name rank %d: %s"
                              % (last, exc))
        got = hb.allgather_object({"rank": rank}, name="obj.after")
        if got != [{"rank": r} for r in range(size)]:
            raise CaseFailure("allgather_object after the failure: %r" % got)
    cases.append(("local/unpicklable-object", unpicklable_object))

    def bool_average():
        b = np.ones(3, np.bool_)
        expect_raises(lambda: hb.reducescatter(b, name="bavg"),
                      hx.InvalidArgumentError, "average")
    cases.append(("local/bool-average", bool_average))

    cases.append(("local/still-works",
                  lambda: still_works(rank, size, "local")))
    return cases


def main() -> None:
    rank = env_rank()
    checker = Checker(rank)

    def before_init():
        if hb.is_initialized():
            raise CaseFailure("is_initialized() True before init")
        for fn in (hb.rank, hb.size, hb.local_rank, hb.local_size,
                   hb.cross_rank, hb.cross_size, hb.mpi_threads_supported,
                   hb.is_homogeneous,
                   lambda: hb.allreduce(np.ones(2), name="early"),
                   lambda: hb.allgather(np.ones(2), name="early"),
                   lambda: hb.broadcast(np.ones(2), 0, name="early"),
                   hb.barrier):
            exc = expect_raises(fn, hx.NotInitializedError, "init")
            if not isinstance(exc, ValueError):
                raise CaseFailure("NotInitializedError is not a ValueError")
    checker.run("local/before-init", before_init)

    hb.init()
    size = hb.size()
    for name, fn in local_cases(rank, size) + mismatch_cases(rank, size):
        checker.run(name, fn)
    hb.shutdown()
    report({"size": size, "ok": checker.all_ok, "time": time.time()}, rank)


if __name__ == "__main__":
    main()
