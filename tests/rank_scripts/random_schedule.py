"""Rank script: many steps of randomly drawn collectives, each checked
against numpy.

    hbrun -np N python random_schedule.py SEED STEPS

Every rank draws the same schedule from SEED: per step one to eight
operations (allreduce out of place and in place, grouped allreduce,
allgather, broadcast, alltoall, reducescatter, allgather_object, and now
and then a rank-divergent request that must fail with MismatchError), with
random dtypes, reduce ops, scale factors, sizes (empty to 2.4 MB, so the
fused, lone, shared-memory and ring paths all run), names (given, or
generated) and process sets (all ranks, or the even ranks). A step submits
its operations asynchronously, then waits for them in an order of this
rank's own, so the runtime sees many interleavings. Inputs come from
common.rank_data, which any rank computes for any other, so every expected
value is numpy's. A wrong value or an unexpected error is recorded and the
run goes on; the report holds the counts and the first failures.
"""
import os
import sys
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_close, env_rank, env_size, rank_data,  # noqa: E402
                    reduce_expected, reducescatter_rows, report)

import hbcore as hb  # noqa: E402
from hbcore.exceptions import MismatchError  # noqa: E402

FLOATS = ["float16", "float32", "float64"]
INTS = ["uint8", "int32", "int64"]
KINDS = ["allreduce", "allreduce_", "grouped", "allgather", "broadcast",
         "alltoall", "reducescatter", "object", "mismatch"]
WEIGHTS = [.23, .15, .10, .15, .10, .10, .10, .04, .03]
MISMATCHES = ["shape", "dtype", "op", "root", "trailing dims"]

Check = Callable[[Any], None]


def pick(g: np.random.Generator, items: List[Any]) -> Any:
    return items[int(g.integers(0, len(items)))]


def draw_count(g: np.random.Generator) -> int:
    """Elements of a tensor: empty, tiny (negotiation-bound), mid-size
    (fused) or large (alone: shared memory on a host, the ring across)."""
    bucket = int(g.integers(0, 10))
    if bucket == 0:
        return 0
    if bucket < 5:
        return int(g.integers(1, 64))
    if bucket < 8:
        return int(g.integers(64, 20000))
    return int(g.integers(20000, 600000))


class Step:
    """One step's operations as this rank submits them."""

    def __init__(self, seed: int, step: int, rank: int, size: int,
                 even_set: hb.ProcessSet) -> None:
        self.rank, self.size = rank, size
        self.even_set = even_set
        self.g = np.random.default_rng([seed, step])  # the same on all ranks
        self.base = (seed * 100003 + step) * 100
        self.pending: List[Tuple[Optional[hb.Handle], Check]] = []
        self.objects: List[Callable[[], None]] = []
        self.mismatches = 0

    def data(self, op_index: int, part: int, rank: int, shape: Tuple,
             dtype: str) -> np.ndarray:
        return rank_data(self.base + op_index * 8 + part, rank, shape, dtype)

    def draw(self, index: int) -> None:
        """Draws operation ``index`` (every rank draws every value, member
        or not, so the generators stay in step) and submits it here when
        this rank takes part."""
        g = self.g
        kind = KINDS[int(g.choice(len(KINDS), p=WEIGHTS))]
        use_set = self.size >= 2 and g.random() < 0.25
        members = ([r for r in range(self.size) if r % 2 == 0] if use_set
                   else list(range(self.size)))
        kwargs = {"process_set": self.even_set} if use_set else {}
        name = None if g.random() < 0.5 else "sched.%d.%d" % (self.base, index)
        handlers = {
            "allreduce": self._allreduce,
            "allreduce_": self._allreduce_in_place,
            "grouped": self._grouped,
            "allgather": self._allgather,
            "broadcast": self._broadcast,
            "alltoall": self._alltoall,
            "reducescatter": self._reducescatter,
            "object": self._object,
            "mismatch": self._mismatch,
        }
        handlers[kind](g, index, members, name, kwargs)

    # -- reductions --------------------------------------------------------
    def _reduction(self, g, index, members, count):
        """Draws a reduction of ``count`` tensors; None where this rank is
        not a member, else (dtype, op, pre, post, inputs, expected)."""
        dtype = pick(g, FLOATS + INTS)
        ops = ["Sum", "Min", "Max"] + (["Average"] if dtype in FLOATS else [])
        op = pick(g, ops)
        # float16 rounds every partial sum: keep its magnitudes small.
        scales = [1.0, 0.5] if dtype == "float16" else [1.0, 0.5, 2.0]
        pre = pick(g, scales) if dtype in FLOATS else 1.0
        post = pick(g, scales) if dtype in FLOATS else 1.0
        shapes = [(draw_count(g),) if g.random() < 0.7 else
                  (int(g.integers(1, 40)), int(g.integers(1, 40)))
                  for _ in range(count)]
        if self.rank not in members:
            return None  # every value is drawn: the generator stays in step
        expected = [reduce_expected(
            [self.data(index, j, r, shape, dtype) for r in members], dtype,
            op, pre, post) for j, shape in enumerate(shapes)]
        inputs = [self.data(index, j, self.rank, shape, dtype)
                  for j, shape in enumerate(shapes)]
        return dtype, getattr(hb, op), pre, post, inputs, expected

    def _allreduce(self, g, index, members, name, kwargs):
        drawn = self._reduction(g, index, members, 1)
        if drawn is None:
            return
        dtype, op, pre, post, inputs, expected = drawn
        handle = hb.allreduce_async(inputs[0], name=name, op=op,
                                    prescale_factor=pre,
                                    postscale_factor=post, **kwargs)
        self.pending.append((handle, lambda out: assert_close(
            out, expected[0], dtype, "allreduce %s" % dtype)))

    def _allreduce_in_place(self, g, index, members, name, kwargs):
        drawn = self._reduction(g, index, members, 1)
        if drawn is None:
            return
        dtype, op, pre, post, inputs, expected = drawn
        tensor = inputs[0]
        handle = hb.allreduce_async_(tensor, name=name, op=op,
                                     prescale_factor=pre,
                                     postscale_factor=post, **kwargs)

        def check(out: Any) -> None:
            assert out is tensor, "allreduce_ returned another array"
            assert_close(tensor, expected[0], dtype, "allreduce_ %s" % dtype)
        self.pending.append((handle, check))

    def _grouped(self, g, index, members, name, kwargs):
        count = int(g.integers(1, 5))
        drawn = self._reduction(g, index, members, count)
        if drawn is None:
            return
        dtype, op, pre, post, inputs, expected = drawn
        handle = hb.grouped_allreduce_async(inputs, name=name, op=op,
                                            prescale_factor=pre,
                                            postscale_factor=post, **kwargs)

        def check(outs: Any) -> None:
            assert len(outs) == len(expected), "%d results" % len(outs)
            for out, want in zip(outs, expected):
                assert_close(out, want, dtype, "grouped %s" % dtype)
        self.pending.append((handle, check))

    # -- data movement -----------------------------------------------------
    def _allgather(self, g, index, members, name, kwargs):
        dtype = pick(g, FLOATS + INTS)
        rows = [int(g.integers(0, 300)) if g.random() < 0.8 else
                int(g.integers(0, 30000)) for _ in range(self.size)]
        tail = (int(g.integers(1, 5)),)
        if self.rank not in members:
            return
        expected = np.concatenate([self.data(index, 0, r, (rows[r],) + tail,
                                             dtype) for r in members])
        handle = hb.allgather_async(
            self.data(index, 0, self.rank, (rows[self.rank],) + tail, dtype),
            name=name, **kwargs)
        self.pending.append((handle, lambda out: assert_close(
            out, expected, dtype, "allgather %s" % dtype)))

    def _broadcast(self, g, index, members, name, kwargs):
        dtype = pick(g, FLOATS + INTS)
        root = pick(g, members)
        shape = (draw_count(g),)
        if self.rank not in members:
            return
        expected = self.data(index, 0, root, shape, dtype)
        handle = hb.broadcast_async(self.data(index, 0, self.rank, shape,
                                              dtype), root, name=name,
                                    **kwargs)
        self.pending.append((handle, lambda out: assert_close(
            out, expected, dtype, "broadcast from %d" % root)))

    def _alltoall(self, g, index, members, name, kwargs):
        dtype = pick(g, FLOATS + INTS)
        # splits[i][j]: rows the i-th member sends to the j-th.
        splits = g.integers(0, 200, size=(self.size, self.size))
        if self.rank not in members:
            return
        m = len(members)
        me = members.index(self.rank)

        def sent(i: int) -> np.ndarray:
            return self.data(index, 0, members[i],
                             (int(splits[i][:m].sum()), 2), dtype)
        expected = np.concatenate([
            sent(i)[int(splits[i][:me].sum()):int(splits[i][:me + 1].sum())]
            for i in range(m)])
        handle = hb.alltoall_async(sent(me), splits=splits[me][:m].tolist(),
                                   name=name, **kwargs)

        def check(out: Any) -> None:
            received, received_splits = out
            assert_close(received, expected, dtype, "alltoall %s" % dtype)
            np.testing.assert_array_equal(received_splits, splits[:m, me])
        self.pending.append((handle, check))

    def _reducescatter(self, g, index, members, name, kwargs):
        dtype = pick(g, ["float32", "float64", "int32"])
        op = "Sum" if dtype == "int32" or g.random() < 0.5 else "Average"
        rows = int(g.integers(0, 500))
        if self.rank not in members:
            return
        full = reduce_expected([self.data(index, 0, r, (rows, 3), dtype)
                                for r in members], dtype, op)
        start, count = reducescatter_rows(rows, len(members),
                                          members.index(self.rank))
        handle = hb.reducescatter_async(
            self.data(index, 0, self.rank, (rows, 3), dtype), name=name,
            op=getattr(hb, op), **kwargs)
        self.pending.append((handle, lambda out: assert_close(
            out, full[start:start + count], dtype, "reducescatter %s" % op)))

    def _object(self, g, index, members, name, kwargs):
        length = int(g.integers(0, 2000))
        if kwargs:  # object collectives run over every rank here
            return

        def gather() -> None:
            got = hb.allgather_object({"rank": self.rank, "items": length})
            assert got == [{"rank": r, "items": length}
                           for r in range(self.size)], got
        self.objects.append(gather)

    def _mismatch(self, g, index, members, name, kwargs):
        how = pick(g, MISMATCHES)
        if self.rank not in members or len(members) < 2:
            return
        odd_one = self.rank == members[-1]
        self.mismatches += 1
        if how == "trailing dims":
            handle = hb.allgather_async(
                np.ones((2, 3 if odd_one else 4), np.float32), name=name,
                **kwargs)
        elif how == "root":
            root = members[1] if odd_one else members[0]
            handle = hb.broadcast_async(np.ones(5, np.float32), root,
                                        name=name, **kwargs)
        else:
            x = np.ones(7 if how == "shape" and odd_one else 5,
                        np.float64 if how == "dtype" and odd_one
                        else np.float32)
            op = hb.Max if how == "op" and odd_one else hb.Sum
            handle = hb.allreduce_async(x, name=name, op=op, **kwargs)

        def check(_: Any) -> None:
            try:
                hb.synchronize(handle)
            except MismatchError:
                return
            raise AssertionError("no MismatchError for a different %s" % how)
        self.pending.append((None, check))

    def finish(self, seed: int, step: int) -> Tuple[int, List[str]]:
        """Runs the object collectives (blocking, in schedule order), then
        waits for the rest in this rank's own order; returns how many
        results were checked and what failed."""
        failures = []
        checked = 0
        for gather in self.objects:
            checked += 1
            try:
                gather()
            except Exception as exc:  # noqa: BLE001 - recorded, run goes on
                failures.append("object: %r" % exc)
        order = np.random.default_rng([seed, step, 1 + self.rank]).permutation(
            len(self.pending))
        for i in order:
            handle, check = self.pending[i]
            checked += 1
            try:
                check(None if handle is None else hb.synchronize(handle))
            except Exception as exc:  # noqa: BLE001 - recorded, run goes on
                failures.append("%s: %s" % (type(exc).__name__, exc))
        return checked, failures


def main() -> None:
    seed, steps = int(sys.argv[1]), int(sys.argv[2])
    rank, size = env_rank(), env_size()
    even_set = hb.ProcessSet([r for r in range(size) if r % 2 == 0])
    hb.init(process_sets=[even_set])
    checked, mismatches, failures = 0, 0, []
    for step in range(steps):
        current = Step(seed, step, rank, size, even_set)
        for index in range(int(current.g.integers(1, 9))):
            current.draw(index)
        done, failed = current.finish(seed, step)
        checked += done
        mismatches += current.mismatches
        failures += ["step %d: %s" % (step, f) for f in failed]
    # Ranks outside the even set finish first: wait for all before any
    # rank's shutdown ends everyone's runtime.
    hb.barrier()
    report({"checked": checked, "mismatches": mismatches,
            "failures": failures[:20], "failure_count": len(failures)})
    hb.shutdown()


if __name__ == "__main__":
    main()
