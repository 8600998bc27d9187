"""Rank script: every collective x every dtype x a few shapes, checked
against numpy on every rank.

    hbrun -np N python collectives.py [DTYPE,DTYPE,...]   (default: all)

Each case is a function run by common.Checker under the name
"<group>/<detail>"; groups are listed by group_names() so the pytest side
(tests/test_collectives.py) can parametrise over them without MPI. All
cases are symmetric: every rank submits the same tensor names in the same
order, so a failing case does not desynchronise the following ones.

Expected values: every rank recomputes every other rank's input with
common.rank_data(seed, r, ...) and reduces it with numpy.
"""
import os
import sys
import time
import warnings
import zlib
from typing import Callable, List, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DTYPE_NAMES, CaseFailure, Checker, all_rank_data,  # noqa: E402
                    assert_close, await_peers, env_rank, exc_info,
                    expect_raises, is_float, rank_data, reduce_expected,
                    reducescatter_rows, report, signal_peers, wait_poll)

hb = None  # hbcore, imported in main() (importing this module needs no MPI)

OPS = ["Average", "Sum", "Min", "Max", "Product"]
BOOL_OPS = ["Sum", "Min", "Max", "Product"]
SHAPES = [(5,), (2, 3, 4), (0,), (3, 0)]

Case = Tuple[str, Callable[[], None]]


def _op(name: str):
    return getattr(hb, name)


def _seed(*parts) -> int:
    """A stable seed per case (not Python's randomised hash)."""
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def _kind(op: str) -> str:
    return "positive" if op == "Product" else "any"


def _ops_for(dt: str) -> List[str]:
    return BOOL_OPS if dt == "bool" else OPS


# ------------------------------------------------------------ case builders

def allreduce_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    for shape in SHAPES:
        for op in _ops_for(dt):
            name = "allreduce/%s/%s/%s" % (dt, "x".join(map(str, shape)) or
                                           "scalar", op)

            def fn(shape=shape, op=op, name=name):
                seed = _seed(name)
                inputs = all_rank_data(seed, size, shape, dt, _kind(op))
                x = inputs[rank].copy()
                if op == "Average":
                    out = hb.allreduce(x, name=name)  # Average is the default
                else:
                    out = hb.allreduce(x, name=name, op=_op(op))
                assert_close(out, reduce_expected(inputs, dt, op), dt, name)
                assert_close(x, inputs[rank], dt, "input left unchanged")
            cases.append((name, fn))
    if dt == "bool":
        name = "allreduce/bool/average-raises"

        def fn(name=name):
            x = rank_data(1, rank, (4,), "bool")
            expect_raises(lambda: hb.allreduce(x, name=name),
                          hb.InvalidArgumentError, "average", "bool")
            expect_raises(lambda: hb.allreduce(x, name=name, op=hb.Average),
                          hb.InvalidArgumentError, "average")
        cases.append((name, fn))
    return cases


def scalar_cases(dt: str, size: int, rank: int) -> List[Case]:
    """0-d arrays keep their shape through allreduce and broadcast."""
    cases = []
    for op in _ops_for(dt):
        name = "scalar/%s/allreduce/%s" % (dt, op)

        def fn(op=op, name=name):
            inputs = all_rank_data(_seed(name), size, (), dt, _kind(op))
            out = hb.allreduce(inputs[rank], name=name, op=_op(op))
            assert_close(out, reduce_expected(inputs, dt, op), dt, name)
        cases.append((name, fn))
    name = "scalar/%s/broadcast" % dt

    def bcast(name=name):
        inputs = all_rank_data(_seed(name), size, (), dt)
        root = size - 1
        out = hb.broadcast(inputs[rank], root, name=name)
        assert_close(out, inputs[root], dt, name)
    cases.append((name, bcast))
    return cases


def scale_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    pre, post = (0.5, 1.5) if is_float(dt) else (2, 3)
    for op in ("Sum", "Average"):
        for label, kw in (("pre", dict(prescale_factor=pre)),
                          ("post", dict(postscale_factor=post)),
                          ("both", dict(prescale_factor=pre,
                                        postscale_factor=post))):
            name = "scale/%s/allreduce/%s/%s" % (dt, op, label)

            def fn(op=op, kw=kw, name=name):
                inputs = all_rank_data(_seed(name), size, (3, 4), dt, "small")
                out = hb.allreduce(inputs[rank], name=name, op=_op(op), **kw)
                expected = reduce_expected(
                    inputs, dt, op, kw.get("prescale_factor", 1),
                    kw.get("postscale_factor", 1))
                assert_close(out, expected, dt, name)
            cases.append((name, fn))
        name = "scale/%s/reducescatter/%s" % (dt, op)

        def rs(op=op, name=name):
            n = 2 * size + 1
            inputs = all_rank_data(_seed(name), size, (n, 2), dt, "small")
            out = hb.reducescatter(inputs[rank], name=name, op=_op(op),
                                   prescale_factor=pre, postscale_factor=post)
            start, count = reducescatter_rows(n, size, rank)
            full = reduce_expected(inputs, dt, op, pre, post)
            assert_close(out, full[start:start + count], dt, name)
        cases.append((name, rs))
    # fused (async) allreduce with scale factors takes the fusion-buffer path
    name = "scale/%s/fused" % dt

    def fused(name=name):
        handles, expected = [], []
        for i, shape in enumerate([(4,), (2, 3), (5,)]):
            inputs = all_rank_data(_seed(name, i), size, shape, dt, "small")
            handles.append(hb.allreduce_async(
                inputs[rank], name="%s.%d" % (name, i), op=hb.Average,
                prescale_factor=pre, postscale_factor=post))
            expected.append(reduce_expected(inputs, dt, "Average", pre, post))
        for i, (h, e) in enumerate(zip(handles, expected)):
            assert_close(hb.synchronize(h), e, dt, "%s.%d" % (name, i))
    cases.append((name, fused))
    return cases


def inplace_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    op = "Sum"
    name = "inplace/%s/allreduce_" % dt

    def ar(name=name):
        inputs = all_rank_data(_seed(name), size, (2, 5), dt)
        x = inputs[rank].copy()
        out = hb.allreduce_(x, name=name, op=hb.Sum)
        if out is not x:
            raise CaseFailure("allreduce_ returned a new object")
        assert_close(x, reduce_expected(inputs, dt, op), dt, name)
    cases.append((name, ar))

    name = "inplace/%s/allreduce_async_" % dt

    def ara(name=name):
        inputs = all_rank_data(_seed(name), size, (7,), dt)
        x = inputs[rank].copy()
        h = hb.allreduce_async_(x, name=name, op=hb.Max)
        out = hb.synchronize(h)
        if out is not x:
            raise CaseFailure("allreduce_async_ result is not the input")
        assert_close(x, reduce_expected(inputs, dt, "Max"), dt, name)
    cases.append((name, ara))

    name = "inplace/%s/broadcast_" % dt

    def bc(name=name):
        inputs = all_rank_data(_seed(name), size, (3, 2), dt)
        for root in range(size):
            x = inputs[rank].copy()
            out = hb.broadcast_(x, root, name="%s.%d" % (name, root))
            if out is not x:
                raise CaseFailure("broadcast_ returned a new object")
            assert_close(x, inputs[root], dt, "%s root %d" % (name, root))
    cases.append((name, bc))

    name = "inplace/%s/grouped_allreduce_" % dt

    def gar(name=name):
        shapes = [(4,), (2, 2), (0,)]
        per = [all_rank_data(_seed(name, i), size, s, dt)
               for i, s in enumerate(shapes)]
        xs = [p[rank].copy() for p in per]
        outs = hb.grouped_allreduce_(xs, name=name, op=hb.Sum)
        if len(outs) != 3 or any(o is not x for o, x in zip(outs, xs)):
            raise CaseFailure("grouped_allreduce_ did not return the inputs")
        for i, p in enumerate(per):
            assert_close(xs[i], reduce_expected(p, dt, "Sum"), dt,
                         "%s[%d]" % (name, i))
    cases.append((name, gar))
    return cases


def async_cases(dt: str, size: int, rank: int) -> List[Case]:
    """Everything of one dtype submitted at once (fused), then polled."""
    name = "async/%s/all-ops" % dt

    def fn(name=name):
        pending = []  # (label, handle, expected)
        for shape in [(5,), (2, 3, 4), (0,), (1,)]:
            for op in _ops_for(dt):
                label = "%s/%s/%s" % (name, shape, op)
                inputs = all_rank_data(_seed(label), size, shape, dt,
                                       _kind(op))
                h = hb.allreduce_async(inputs[rank], name=label, op=_op(op))
                pending.append((label, h, reduce_expected(inputs, dt, op)))
        label = name + "/allgather"
        g_inputs = [rank_data(_seed(label), r, (r + 1, 2), dt)
                    for r in range(size)]
        pending.append((label, hb.allgather_async(g_inputs[rank], name=label),
                        np.concatenate(g_inputs)))
        label = name + "/broadcast"
        b_inputs = all_rank_data(_seed(label), size, (4,), dt)
        pending.append((label, hb.broadcast_async(b_inputs[rank], size - 1,
                                                  name=label),
                        b_inputs[size - 1]))
        label = name + "/alltoall"
        a_inputs = all_rank_data(_seed(label), size, (size * 2, 3), dt)
        pending.append((label, hb.alltoall_async(a_inputs[rank], name=label),
                        np.concatenate([a[2 * rank:2 * rank + 2]
                                        for a in a_inputs])))
        label = name + "/reducescatter"
        n = size + 1
        r_inputs = all_rank_data(_seed(label), size, (n, 2), dt)
        start, count = reducescatter_rows(n, size, rank)
        full = reduce_expected(r_inputs, dt, "Sum")
        pending.append((label, hb.reducescatter_async(r_inputs[rank],
                                                      name=label, op=hb.Sum),
                        full[start:start + count]))
        for label, h, expected in pending:
            wait_poll(h, hb.poll)
        for label, h, expected in pending:
            out = hb.synchronize(h)
            assert_close(out, expected, dt, label)
            if not hb.poll(h):
                raise CaseFailure("%s: poll() False after synchronize" % label)
            again = hb.synchronize(h)
            if again is not out:
                raise CaseFailure("%s: second synchronize returned a "
                                  "different object" % label)
    return [(name, fn)]


def grouped_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    # Every op: a group is fused, so this is what checks the fused path's
    # reductions (node shared memory or MPI, see test_collectives.py).
    for op in _ops_for(dt):
        name = "grouped/%s/allreduce/%s" % (dt, op)

        def gar(op=op, name=name):
            shapes = [(4,), (2, 3), (0,), (1, 1, 2)]
            per = [all_rank_data(_seed(name, i), size, s, dt)
                   for i, s in enumerate(shapes)]
            if op == "Average":
                outs = hb.grouped_allreduce([p[rank] for p in per], name=name)
            else:
                outs = hb.grouped_allreduce([p[rank] for p in per], name=name,
                                            op=_op(op))
            if not isinstance(outs, list) or len(outs) != len(shapes):
                raise CaseFailure("expected a list of %d arrays, got %r"
                                  % (len(shapes), type(outs)))
            for i, p in enumerate(per):
                assert_close(outs[i], reduce_expected(p, dt, op), dt,
                             "%s[%d]" % (name, i))
        cases.append((name, gar))

    name = "grouped/%s/allgather" % dt

    def gag(name=name):
        per = [[rank_data(_seed(name, i), r, (r + i, 3), dt)
                for r in range(size)] for i in range(3)]
        outs = hb.grouped_allgather([p[rank] for p in per], name=name)
        if len(outs) != 3:
            raise CaseFailure("expected 3 outputs, got %d" % len(outs))
        for i, p in enumerate(per):
            assert_close(outs[i], np.concatenate(p), dt, "%s[%d]" % (name, i))
    cases.append((name, gag))

    name = "grouped/%s/reducescatter" % dt

    def grs(name=name):
        ns = [size, 2 * size + 1, 1]
        per = [all_rank_data(_seed(name, i), size, (n, 2), dt)
               for i, n in enumerate(ns)]
        outs = hb.grouped_reducescatter([p[rank] for p in per], name=name,
                                        op=hb.Sum)
        if len(outs) != len(ns):
            raise CaseFailure("expected %d outputs, got %d" % (len(ns),
                                                               len(outs)))
        for i, (n, p) in enumerate(zip(ns, per)):
            start, count = reducescatter_rows(n, size, rank)
            full = reduce_expected(p, dt, "Sum")
            assert_close(outs[i], full[start:start + count], dt,
                         "%s[%d]" % (name, i))
    cases.append((name, grs))
    return cases


def allgather_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    layouts = {
        "1d": lambda r: (r + 1,),
        "3d": lambda r: (r + 1, 2, 3),
        "zero-rows-on-even-ranks": lambda r: ((r % 2) * 2, 3),
        "same-rows": lambda r: (2, 2),
        "zero-size-trailing": lambda r: (r + 1, 0),
        "all-empty": lambda r: (0, 4),
    }
    for label, shape_of in layouts.items():
        name = "allgather/%s/%s" % (dt, label)

        def fn(shape_of=shape_of, name=name):
            inputs = [rank_data(_seed(name), r, shape_of(r), dt)
                      for r in range(size)]
            out = hb.allgather(inputs[rank], name=name)
            assert_close(out, np.concatenate(inputs), dt, name)
        cases.append((name, fn))
    return cases


def broadcast_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    for shape in [(5,), (2, 3, 4), (0,)]:
        name = "broadcast/%s/%s" % (dt, "x".join(map(str, shape)))

        def fn(shape=shape, name=name):
            inputs = all_rank_data(_seed(name), size, shape, dt)
            for root in range(size):
                x = inputs[rank].copy()
                out = hb.broadcast(x, root, name="%s.root%d" % (name, root))
                assert_close(out, inputs[root], dt,
                             "%s root %d" % (name, root))
                assert_close(x, inputs[rank], dt, "input left unchanged")
        cases.append((name, fn))
    return cases


def alltoall_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    for label, trailing in (("1d", ()), ("3d", (2, 2))):
        name = "alltoall/%s/even-%s" % (dt, label)

        def even(trailing=trailing, name=name):
            inputs = all_rank_data(_seed(name), size, (2 * size,) + trailing,
                                   dt)
            out = hb.alltoall(inputs[rank], name=name)
            if isinstance(out, tuple):
                raise CaseFailure("alltoall without splits returned a tuple")
            expected = np.concatenate([x[2 * rank:2 * rank + 2]
                                       for x in inputs])
            assert_close(out, expected, dt, name)
        cases.append((name, even))

        name = "alltoall/%s/splits-%s" % (dt, label)

        def split(trailing=trailing, name=name):
            def splits_of(src):
                return [(src + 2 * dst) % 3 for dst in range(size)]
            inputs = [rank_data(_seed(name), src,
                                (sum(splits_of(src)),) + trailing, dt)
                      for src in range(size)]
            result = hb.alltoall(inputs[rank], splits=splits_of(rank),
                                 name=name)
            if not (isinstance(result, tuple) and len(result) == 2):
                raise CaseFailure("alltoall with splits returned %r, not "
                                  "(output, received_splits)" % type(result))
            out, received = result
            pieces, expected_splits = [], []
            for src in range(size):
                sp = splits_of(src)
                start = sum(sp[:rank])
                pieces.append(inputs[src][start:start + sp[rank]])
                expected_splits.append(sp[rank])
            assert_close(out, np.concatenate(pieces), dt, name)
            if list(np.asarray(received).tolist()) != expected_splits:
                raise CaseFailure("received_splits %r, expected %r"
                                  % (received, expected_splits))
        cases.append((name, split))

    name = "alltoall/%s/async-batch" % dt

    def batch(name=name):
        """Alltoalls submitted together (the core fuses them into one
        exchange, whatever their dtypes and row shapes): uneven splits,
        zero rows to some peers, an int64 and a float64 member."""
        def splits_of(src, k):
            return [(src * (k + 1) + 2 * dst + k) % 4 for dst in range(size)]
        members = [(dt, ()), (dt, (3,)), ("int64", ()), (dt, (2, 2)),
                   ("float64", (5,))]
        pending = []
        for k, (member_dt, trailing) in enumerate(members):
            label = "%s/%d" % (name, k)
            inputs = [rank_data(_seed(label), src,
                                (sum(splits_of(src, k)),) + trailing,
                                member_dt) for src in range(size)]
            pieces = []
            for src in range(size):
                sp = splits_of(src, k)
                start = sum(sp[:rank])
                pieces.append(inputs[src][start:start + sp[rank]])
            expected_splits = [splits_of(src, k)[rank] for src in range(size)]
            h = hb.alltoall_async(inputs[rank], splits=splits_of(rank, k),
                                  name=label)
            pending.append((label, member_dt, h, np.concatenate(pieces),
                            expected_splits))
        for label, member_dt, h, expected, expected_splits in pending:
            out, received = hb.synchronize(h)
            assert_close(out, expected, member_dt, label)
            if list(np.asarray(received).tolist()) != expected_splits:
                raise CaseFailure("%s: received_splits %r, expected %r"
                                  % (label, received, expected_splits))
    cases.append((name, batch))

    name = "alltoall/%s/zero-splits" % dt

    def zero(name=name):
        x = rank_data(_seed(name), rank, (0, 3), dt)
        out, received = hb.alltoall(x, splits=[0] * size, name=name)
        assert_close(out, np.zeros((0, 3), x.dtype), dt, name)
        if list(np.asarray(received).tolist()) != [0] * size:
            raise CaseFailure("received_splits %r" % (received,))
    cases.append((name, zero))
    return cases


def reducescatter_cases(dt: str, size: int, rank: int) -> List[Case]:
    cases = []
    ops = ["Sum", "Min"] if dt == "bool" else ["Sum", "Average", "Max"]
    for op in ops:
        for n_label, n in (("even", 2 * size), ("uneven", 2 * size + 1),
                           ("fewer-rows", 1), ("zero-rows", 0)):
            for trailing in ((), (2, 3)):
                name = "reducescatter/%s/%s/%s/%dd" % (dt, op, n_label,
                                                       1 + len(trailing))

                def fn(op=op, n=n, trailing=trailing, name=name):
                    inputs = all_rank_data(_seed(name), size, (n,) + trailing,
                                           dt)
                    if op == "Average":
                        out = hb.reducescatter(inputs[rank], name=name)
                    else:
                        out = hb.reducescatter(inputs[rank], name=name,
                                               op=_op(op))
                    start, count = reducescatter_rows(n, size, rank)
                    full = reduce_expected(inputs, dt, op)
                    assert_close(out, full[start:start + count], dt, name)
                cases.append((name, fn))
    return cases


PER_DTYPE = [
    ("allreduce", allreduce_cases),
    ("scalar", scalar_cases),
    ("scale", scale_cases),
    ("inplace", inplace_cases),
    ("async", async_cases),
    ("grouped", grouped_cases),
    ("allgather", allgather_cases),
    ("broadcast", broadcast_cases),
    ("alltoall", alltoall_cases),
    ("reducescatter", reducescatter_cases),
]
# 'scale' makes no sense for bool (scale factors are ignored there).
SKIP = {("scale", "bool")}


# ------------------------------------------------------------------- misc

def expected_topology(size: int) -> dict:
    """local/cross rank and size of every rank, from the host layout the
    test launched (HB_TEST_HOSTS: slots per host, e.g. "2,2" for
    ``-H hA:2,hB:2``; unset: one host). MPI fills hosts in order, and the
    cross communicator groups the ranks of equal local rank by host."""
    slots = [int(s) for s in os.environ.get("HB_TEST_HOSTS", str(size)).split(",")]
    if sum(slots) != size:
        raise CaseFailure("HB_TEST_HOSTS=%s does not add up to %d ranks"
                          % (os.environ.get("HB_TEST_HOSTS"), size))
    host = [h for h, n in enumerate(slots) for _ in range(n)]
    local = [r - sum(slots[:host[r]]) for r in range(size)]
    return {
        "local ranks": local,
        "local sizes": [slots[host[r]] for r in range(size)],
        "cross ranks": [sum(1 for h in range(host[r]) if slots[h] > local[r])
                        for r in range(size)],
        "cross sizes": [sum(1 for n in slots if n > local[r])
                        for r in range(size)],
        "homogeneous": len(set(slots)) == 1,
    }


def misc_cases(size: int, rank: int) -> List[Case]:
    cases = []

    def topology():
        mine = np.array([hb.rank(), hb.size(), hb.local_rank(),
                         hb.local_size(), hb.cross_rank(), hb.cross_size()],
                        np.int64)
        if hb.rank() != env_rank():
            raise CaseFailure("rank() %d but the launcher says %d"
                              % (hb.rank(), env_rank()))
        table = hb.allgather(mine.reshape(1, -1), name="misc.topology")
        if table.shape != (size, 6):
            raise CaseFailure("topology table shape %s" % (table.shape,))
        if table[:, 0].tolist() != list(range(size)):
            raise CaseFailure("ranks %s" % table[:, 0].tolist())
        if set(table[:, 1].tolist()) != {size}:
            raise CaseFailure("sizes %s" % table[:, 1].tolist())
        want = expected_topology(size)
        for column, name in enumerate(["local ranks", "local sizes",
                                       "cross ranks", "cross sizes"], 2):
            got = table[:, column].tolist()
            if got != want[name]:
                raise CaseFailure("%s %s, expected %s" % (name, got,
                                                          want[name]))
        if hb.is_homogeneous() is not want["homogeneous"]:
            raise CaseFailure("is_homogeneous() = %r, expected %r"
                              % (hb.is_homogeneous(), want["homogeneous"]))
    cases.append(("misc/topology", topology))

    def threads():
        if hb.mpi_threads_supported() is not True:
            raise CaseFailure("mpi_threads_supported() = %r"
                              % hb.mpi_threads_supported())
    cases.append(("misc/mpi_threads_supported", threads))

    def idempotent():
        hb.init()
        hb.init()
        if not hb.is_initialized() or hb.rank() != rank or hb.size() != size:
            raise CaseFailure("second init() changed the state")
        inputs = all_rank_data(5, size, (3,), "float32")
        out = hb.allreduce(inputs[rank], name="misc.after-reinit", op=hb.Sum)
        assert_close(out, reduce_expected(inputs, "float32", "Sum"),
                     "float32", "allreduce after repeated init")
    cases.append(("misc/init-idempotent", idempotent))

    def barrier():
        out_dir = os.environ["HB_TEST_OUT"]
        # The last rank arrives last: it writes its marker only once every
        # other rank has written its own and is about to enter the barrier
        # (a marker-file handshake), so without a real barrier the others
        # would look before it arrived.
        if rank == size - 1:
            await_peers(["barrier-entering.%d" % r for r in range(size - 1)])
        open(os.path.join(out_dir, "barrier.%d" % rank), "w").close()
        if rank != size - 1:
            signal_peers("barrier-entering.%d" % rank)
        result = hb.barrier()
        if result is not None:
            raise CaseFailure("barrier() returned %r" % (result,))
        missing = [r for r in range(size) if not os.path.exists(
            os.path.join(out_dir, "barrier.%d" % r))]
        if missing:
            raise CaseFailure("after barrier(), ranks %s had not arrived"
                              % missing)
        hb.barrier()  # again (cached path)
    cases.append(("misc/barrier", barrier))

    def objects():
        def obj(r):
            return {"from": r, "nested": {"list": [r, {"deep": (r, "x" * r)}],
                                          "set": {r, r + 1}, "none": None},
                    "floats": [0.5 * r]}
        for root in range(size):
            got = hb.broadcast_object(obj(rank), root_rank=root,
                                      name="misc.bcast_obj.%d" % root)
            if got != obj(root):
                raise CaseFailure("broadcast_object root %d gave %r"
                                  % (root, got))
        got = hb.broadcast_object(obj(rank))  # default root 0, auto name
        if got != obj(0):
            raise CaseFailure("broadcast_object default root gave %r" % got)
        got = hb.allgather_object(obj(rank), name="misc.gather_obj")
        if got != [obj(r) for r in range(size)]:
            raise CaseFailure("allgather_object gave %r" % (got,))
        got = hb.allgather_object({"big": "y" * (1000 * (rank + 1))})
        if [len(g["big"]) for g in got] != [1000 * (r + 1)
                                            for r in range(size)]:
            raise CaseFailure("allgather_object of unequal sizes wrong")
    cases.append(("misc/objects", objects))

    def mixed_group():
        dts = ["float32", "float64", "int32", "float16"]
        per = [all_rank_data(_seed("mixed", d), size, (3,), d) for d in dts]
        outs = hb.grouped_allreduce([p[rank] for p in per], op=hb.Sum,
                                    name="misc.mixed")
        for d, p, o in zip(dts, per, outs):
            assert_close(o, reduce_expected(p, d, "Sum"), d, "mixed " + d)
    cases.append(("misc/grouped-mixed-dtypes", mixed_group))

    def noname():
        for i in range(3):
            inputs = all_rank_data(_seed("noname", i), size, (4,), "int32")
            out = hb.allreduce(inputs[rank], op=hb.Sum)
            assert_close(out, reduce_expected(inputs, "int32", "Sum"),
                         "int32", "unnamed allreduce %d" % i)
        inputs = [rank_data(_seed("noname-g"), r, (r + 1,), "int64")
                  for r in range(size)]
        assert_close(hb.allgather(inputs[rank]), np.concatenate(inputs),
                     "int64", "unnamed allgather")
    cases.append(("misc/unnamed", noname))

    def deprecated_average():
        inputs = all_rank_data(_seed("avg-param"), size, (4,), "float64")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = hb.allreduce(inputs[rank], average=False, name="misc.avgF")
        assert_close(out, reduce_expected(inputs, "float64", "Sum"),
                     "float64", "average=False")
        if not any(issubclass(w.category, DeprecationWarning)
                   for w in caught):
            raise CaseFailure("average= gave no DeprecationWarning")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = hb.allreduce(inputs[rank], average=True, name="misc.avgT")
        assert_close(out, reduce_expected(inputs, "float64", "Average"),
                     "float64", "average=True")
        expect_raises(lambda: hb.allreduce(inputs[rank], average=True,
                                           op=hb.Sum, name="misc.avgboth"),
                      ValueError, "op")
    cases.append(("misc/average-parameter", deprecated_average))

    def noncontiguous():
        inputs = all_rank_data(_seed("noncontig"), size, (6, 4), "float32")
        view = inputs[rank][:, ::2]
        out = hb.allreduce(view, op=hb.Sum, name="misc.noncontig")
        assert_close(out, reduce_expected([x[:, ::2] for x in inputs],
                                          "float32", "Sum"), "float32",
                     "strided input")
        lists = [x.tolist() for x in inputs]
        out = hb.allreduce(lists[rank], op=hb.Sum, name="misc.list")
        assert_close(out.astype(np.float64),
                     reduce_expected([np.asarray(l) for l in lists],
                                     "float64", "Sum"), "float64",
                     "list input")
    cases.append(("misc/noncontiguous-and-list-input", noncontiguous))

    def repeated():
        # Same names again and again: the response cache path.
        for step in range(20):
            for i, dt in enumerate(["float32", "int64"]):
                inputs = all_rank_data(_seed("rep", step, i), size, (5,), dt)
                out = hb.allreduce(inputs[rank], name="misc.rep.%d" % i,
                                   op=hb.Sum)
                assert_close(out, reduce_expected(inputs, dt, "Sum"), dt,
                             "step %d tensor %d" % (step, i))
        # Same name, new shape: the cached response must not be reused.
        inputs = all_rank_data(_seed("rep-new"), size, (2, 2), "float32")
        out = hb.allreduce(inputs[rank], name="misc.rep.0", op=hb.Sum)
        assert_close(out, reduce_expected(inputs, "float32", "Sum"),
                     "float32", "same name, new shape")
    cases.append(("misc/repeated-names", repeated))

    def big():
        # Larger than a typical eager MPI message, several fused together.
        handles, expected = [], []
        for i in range(3):
            inputs = all_rank_data(_seed("big", i), size, (300000,),
                                   "float32")
            handles.append(hb.allreduce_async(inputs[rank], op=hb.Sum,
                                              name="misc.big.%d" % i))
            expected.append(reduce_expected(inputs, "float32", "Sum"))
        for i, (h, e) in enumerate(zip(handles, expected)):
            assert_close(hb.synchronize(h), e, "float32", "big %d" % i)
    cases.append(("misc/large-fused", big))

    def join():
        joiner = size - 1
        x = all_rank_data(_seed("join-x"), size, (6,), "float32")
        g = [rank_data(_seed("join-g"), r, (r + 1, 2), "int32")
             for r in range(size)]
        # Warm the cache for the name first (all ranks take part).
        hb.allreduce(x[rank], name="join.sum", op=hb.Sum)
        if rank == joiner:
            last = hb.join()
        else:
            out = hb.allreduce(x[rank], name="join.sum", op=hb.Sum)
            expected = reduce_expected([x[r] for r in range(size)
                                        if r != joiner], "float32", "Sum")
            assert_close(out, expected, "float32", "allreduce with a joined "
                         "rank (joined rank counts as zeros)")
            out = hb.allreduce(x[rank] * 2, name="join.fresh", op=hb.Sum)
            assert_close(out, expected * 2, "float32", "new tensor while a "
                         "rank is joined")
            out = hb.allgather(g[rank], name="join.gather")
            assert_close(out, np.concatenate([g[r] for r in range(size)
                                              if r != joiner]), "int32",
                         "allgather with a joined rank (no rows from it)")
            if rank == 0:
                # Rank 0 joins last: an allreduce only it submits completes
                # once every other rank has joined (joined ranks count as
                # having submitted every tensor, with zeros).
                probe = hb.allreduce(x[0], name="join.probe", op=hb.Sum)
                assert_close(probe, x[0], "float32", "allreduce submitted "
                             "only by rank 0 while the others are joined")
            last = hb.join()
        if last != 0:
            raise CaseFailure("join() returned %r on rank %d, expected 0 "
                              "(the last rank to join)" % (last, rank))
        out = hb.allreduce(x[rank], name="join.after", op=hb.Sum)
        assert_close(out, reduce_expected(x, "float32", "Sum"), "float32",
                     "allreduce after everyone joined")
    cases.append(("misc/join", join))

    def join_coordinator_first():
        # A second round, now rank 0 (the coordinator) joins early and the
        # last rank joins last.
        x = all_rank_data(_seed("join2-x"), size, (3, 2), "int64")
        if rank == 0:
            last = hb.join()
        else:
            out = hb.allreduce(x[rank], name="join.sum", op=hb.Sum)
            expected = reduce_expected(x[1:], "int64", "Sum")
            assert_close(out, expected, "int64", "allreduce while rank 0 "
                         "is joined")
            out = hb.broadcast(x[rank], size - 1, name="join2.bcast")
            assert_close(out, x[size - 1], "int64", "broadcast while rank 0 "
                         "is joined")
            if rank == size - 1:
                # The last rank joins last (see join above).
                probe = hb.allreduce(x[rank], name="join2.probe", op=hb.Sum)
                assert_close(probe, x[rank], "int64", "allreduce submitted "
                             "only by the last rank while the others are "
                             "joined")
            last = hb.join()
        if last != size - 1:
            raise CaseFailure("join() returned %r on rank %d, expected %d"
                              % (last, rank, size - 1))
        out = hb.allreduce(x[rank], name="join2.after", op=hb.Sum)
        assert_close(out, reduce_expected(x, "int64", "Sum"), "int64",
                     "allreduce after the second join")
    cases.append(("misc/join-coordinator-first", join_coordinator_first))

    def poll_before_peer():
        x = all_rank_data(_seed("poll"), size, (4,), "float32")
        if rank == 0:
            h = hb.allreduce_async(x[0], name="misc.poll", op=hb.Sum)
            first = hb.poll(h)
            signal_peers("polled")  # only now the others submit
            if first:
                raise CaseFailure("poll() True before the other ranks "
                                  "submitted the tensor")
        else:
            await_peers(["polled"])
            h = hb.allreduce_async(x[rank], name="misc.poll", op=hb.Sum)
        wait_poll(h, hb.poll)
        assert_close(hb.synchronize(h), reduce_expected(x, "float32", "Sum"),
                     "float32", "after polling")
    cases.append(("misc/poll-before-peer", poll_before_peer))

    def name_reused():
        # One name for different collectives and dtypes, one after the
        # other: each must be negotiated afresh, not served from the cache.
        name = "misc.reused"
        x = all_rank_data(_seed("reuse"), size, (2 * size, 2), "float32")
        assert_close(hb.allreduce(x[rank], name=name, op=hb.Sum),
                     reduce_expected(x, "float32", "Sum"), "float32",
                     "allreduce")
        assert_close(hb.allgather(x[rank], name=name), np.concatenate(x),
                     "float32", "allgather")
        assert_close(hb.broadcast(x[rank], size - 1, name=name), x[size - 1],
                     "float32", "broadcast")
        assert_close(hb.alltoall(x[rank], name=name),
                     np.concatenate([a[2 * rank:2 * rank + 2] for a in x]),
                     "float32", "alltoall")
        start, count = reducescatter_rows(2 * size, size, rank)
        assert_close(hb.reducescatter(x[rank], name=name, op=hb.Sum),
                     reduce_expected(x, "float32", "Sum")[start:start + count],
                     "float32", "reducescatter")
        y = all_rank_data(_seed("reuse-i"), size, (2 * size, 2), "int16")
        assert_close(hb.allreduce(y[rank], name=name, op=hb.Max),
                     reduce_expected(y, "int16", "Max"), "int16",
                     "allreduce, new dtype and op")
        assert_close(hb.allreduce(x[rank], name=name, op=hb.Sum),
                     reduce_expected(x, "float32", "Sum"), "float32",
                     "allreduce again")
    cases.append(("misc/name-reused-across-ops", name_reused))

    def empty_groups():
        if hb.grouped_allreduce([], name="misc.empty.ar") != []:
            raise CaseFailure("grouped_allreduce([]) is not []")
        if hb.grouped_allgather([], name="misc.empty.ag") != []:
            raise CaseFailure("grouped_allgather([]) is not []")
        if hb.grouped_reducescatter([], name="misc.empty.rs") != []:
            raise CaseFailure("grouped_reducescatter([]) is not []")
    cases.append(("misc/empty-groups", empty_groups))
    return cases


MISC_NAMES = ["topology", "mpi_threads_supported", "init-idempotent",
              "barrier", "objects", "grouped-mixed-dtypes", "unnamed",
              "average-parameter", "noncontiguous-and-list-input",
              "repeated-names", "large-fused", "join",
              "join-coordinator-first", "poll-before-peer",
              "name-reused-across-ops", "empty-groups"]


def build_cases(size: int, rank: int,
                dtypes: Sequence[str] = tuple(DTYPE_NAMES)) -> List[Case]:
    cases: List[Case] = []
    for group, builder in PER_DTYPE:
        for dt in dtypes:
            if (group, dt) not in SKIP:
                cases.extend(builder(dt, size, rank))
    cases.extend(misc_cases(size, rank))
    return cases


# Groups reported as one test for all dtypes (one bug would otherwise fail
# eleven tests).
COLLAPSED = {"scalar"}


def group_names(dtypes: Sequence[str] = tuple(DTYPE_NAMES)) -> List[str]:
    """Groups for pytest: '<collective>/<dtype>', 'scalar' and
    'misc/<name>'."""
    names = []
    for g, _ in PER_DTYPE:
        if g in COLLAPSED:
            names.append(g)
        else:
            names.extend("%s/%s" % (g, dt) for dt in dtypes
                         if (g, dt) not in SKIP)
    return names + ["misc/" + n for n in MISC_NAMES]


def main() -> None:
    global hb
    import hbcore
    hb = hbcore
    rank = env_rank()
    checker = Checker(rank)
    before = {"is_initialized": hbcore.is_initialized()}
    hbcore.init()
    size = hbcore.size()

    def initialized():
        if before["is_initialized"] or not hbcore.is_initialized():
            raise CaseFailure("is_initialized() before init %r, after %r"
                              % (before["is_initialized"],
                                 hbcore.is_initialized()))
    checker.run("lifecycle/initialized", initialized)
    dtypes = sys.argv[1].split(",") if len(sys.argv) > 1 else DTYPE_NAMES
    start = time.monotonic()
    for name, fn in build_cases(size, rank, dtypes):
        checker.run(name, fn)
    # The last cases may be local-only: without this a rank that is done
    # would shut the runtime down under the others' feet.
    checker.run("lifecycle/final-barrier", hb.barrier)
    elapsed = time.monotonic() - start
    result = {"size": size, "cases": len(checker.results),
              "seconds": elapsed}
    hbcore.shutdown()

    def after_shutdown():
        if hbcore.is_initialized():
            raise CaseFailure("is_initialized() True after shutdown()")
        expect_raises(hbcore.rank, hbcore.NotInitializedError)
        expect_raises(lambda: hbcore.allreduce(np.ones(2), name="late"),
                      hbcore.NotInitializedError)
        hbcore.shutdown()  # idempotent
    checker.run("lifecycle/after-shutdown", after_shutdown)

    def reinit():
        # shutdown() documents that init() may be called again afterwards.
        hbcore.init()
        if not hbcore.is_initialized() or hbcore.rank() != rank:
            raise CaseFailure("init() after shutdown() did not initialise")
        inputs = all_rank_data(77, size, (3,), "int32")
        out = hbcore.allreduce(inputs[rank], op=hbcore.Sum, name="reinit")
        assert_close(out, reduce_expected(inputs, "int32", "Sum"), "int32",
                     "allreduce after re-init")
        hbcore.shutdown()
    checker.run("lifecycle/reinit", reinit)
    result["ok"] = checker.all_ok
    report(result, rank)


if __name__ == "__main__":
    main()
