"""Rank script: steps of allreduces under recurring names, some eligible for
the fast path (small, Sum or Average, cached after their first step) and
some not (large, Min, prescaled), in an order of each rank's own, each
result checked against numpy.

    hbrun -np N python fast_path_schedule.py SEED STEPS

Every rank draws the same set of tensors per step from SEED; each rank
submits them asynchronously in its own random order and waits for them in
another, so a cached tensor is often pending on some ranks only when a
cycle runs. Every fifth step the last rank also submits one of the cached
small names with another shape, which must fail with MismatchError on
every rank (after which the name is used normally again). Inputs change
every step (common.rank_data), so a stale payload would show. The report
holds the counts and the first failures.
"""
import os
import sys
from typing import Any, Callable, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (assert_close, env_rank, env_size, rank_data,  # noqa: E402
                    reduce_expected, report)

import hbcore as hb  # noqa: E402
from hbcore.exceptions import MismatchError  # noqa: E402

# name: (dtype, shape, op, prescale, postscale, even set). The first group
# fits HB_FAST_PATH_THRESHOLD's default together (5.3 KiB); the rest are
# never carried (size, op or prescale).
TENSORS = {
    "fp.f32": ("float32", (1,), "Sum", 1.0, 1.0, False),
    "fp.f64": ("float64", (3,), "Average", 1.0, 1.0, False),
    "fp.i32": ("int32", (7,), "Sum", 1.0, 1.0, False),
    "fp.f16": ("float16", (2,), "Sum", 1.0, 1.0, False),
    "fp.i64avg": ("int64", (5,), "Average", 1.0, 1.0, False),
    "fp.post": ("float32", (256,), "Average", 1.0, 0.5, False),
    "fp.u8": ("uint8", (16,), "Sum", 1.0, 1.0, False),
    "fp.4k": ("float32", (1024,), "Sum", 1.0, 1.0, False),
    "fp.set": ("float32", (4,), "Sum", 1.0, 1.0, True),
    "slow.large": ("float32", (20000,), "Sum", 1.0, 1.0, False),
    "slow.min": ("float32", (4,), "Min", 1.0, 1.0, False),
    "slow.pre": ("float64", (4,), "Sum", 2.0, 1.0, False),
}
FAST = [n for n in TENSORS if n.startswith("fp.")]


def run_step(seed: int, step: int, rank: int, size: int,
             even_set: hb.ProcessSet) -> Tuple[int, List[str]]:
    g = np.random.default_rng([seed, step])  # the same on every rank
    names = [n for n in TENSORS if g.random() < 0.6]
    mismatch = FAST[int(g.integers(0, len(FAST) - 1))] if step % 5 == 4 \
        else None
    if mismatch in names:
        names.remove(mismatch)
    members = [r for r in range(size) if r % 2 == 0]
    pending: List[Tuple[Any, Callable[[Any], None]]] = []
    order = np.random.default_rng([seed, step, 1 + rank]).permutation(
        len(names) + 1)
    for i in order:
        if i == len(names):
            if mismatch is not None:
                pending.append(submit_mismatch(mismatch, rank, size, step))
            continue
        name = names[i]
        dtype, shape, op, pre, post, in_set = TENSORS[name]
        if in_set and rank not in members:
            continue
        ranks = members if in_set else list(range(size))
        base = seed * 100003 + step * 100 + i
        expected = reduce_expected(
            [rank_data(base, r, shape, dtype) for r in ranks], dtype, op,
            pre, post)
        x = rank_data(base, rank, shape, dtype)
        kwargs = {"process_set": even_set} if in_set else {}
        handle = hb.allreduce_async(x, name=name, op=getattr(hb, op),
                                    prescale_factor=pre,
                                    postscale_factor=post, **kwargs)
        pending.append((handle, lambda out, e=expected, d=dtype, n=name:
                        assert_close(out, e, d, n)))
    failures = []
    wait = np.random.default_rng([seed, step, 100 + rank]).permutation(
        len(pending))
    for k in wait:
        handle, check = pending[k]
        try:
            check(None if handle is None else hb.synchronize(handle))
        except Exception as exc:  # noqa: BLE001 - recorded, run goes on
            failures.append("step %d: %s: %s" % (step, type(exc).__name__,
                                                 exc))
    return len(pending), failures


def submit_mismatch(name: str, rank: int, size: int, step: int
                    ) -> Tuple[Any, Callable[[Any], None]]:
    """The cached name with one more element on the last rank."""
    dtype, shape, op, _, _, _ = TENSORS[name]
    if TENSORS[name][5]:  # the set's tensor: use the global one instead
        name, (dtype, shape, op) = "fp.f32", TENSORS["fp.f32"][:3]
    odd = rank == size - 1
    x = np.ones((shape[0] + (1 if odd else 0),), dtype)
    handle = hb.allreduce_async(x, name=name, op=getattr(hb, op))

    def check(_: Any) -> None:
        try:
            hb.synchronize(handle)
        except MismatchError as exc:
            if name not in str(exc):
                raise AssertionError("error does not name %s: %s"
                                     % (name, exc))
            return
        raise AssertionError("no MismatchError for %s's shape (step %d)"
                             % (name, step))
    return None, check


def main() -> None:
    seed, steps = int(sys.argv[1]), int(sys.argv[2])
    rank, size = env_rank(), env_size()
    even_set = hb.ProcessSet([r for r in range(size) if r % 2 == 0])
    hb.init(process_sets=[even_set])
    checked, failures = 0, []
    for step in range(steps):
        done, failed = run_step(seed, step, rank, size, even_set)
        checked += done
        failures += failed
    hb.barrier()
    report({"checked": checked, "failures": failures[:20],
            "failure_count": len(failures)})
    hb.shutdown()


if __name__ == "__main__":
    main()
