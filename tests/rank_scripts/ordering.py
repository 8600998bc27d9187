"""Rank script: the same tensors submitted in a different order on every
rank, from several threads, and a 500-tensor stress mix.

    hbrun -np N python ordering.py MODE [COUNT] [SEED]

MODE:
  order    COUNT tensors (default 50), each rank submits them async in its
           own rank-seeded order, then synchronizes all; done twice with
           the same names (second round hits the response cache in a
           different order).
  threads  4 threads per rank, each submitting its own COUNT tensors
           (default 25) in batches (the same on every rank), each batch in
           a rank-seeded order and then synchronized, with small random
           pauses.
  stress   COUNT tensors (default 500) of random shape, dtype and collective
           (allreduce / allgather / broadcast / alltoall / reducescatter),
           async in a rank-seeded order, then every result checked; then
           the same tensors again in another order.

The tensor specs come from a seed shared by all ranks; rank r's data from
(seed, r), so every rank recomputes the others' inputs and checks every
result against numpy. Case names: "<mode>/..." (see Checker).
"""
import os
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DTYPE_NAMES, CaseFailure, Checker, assert_close,  # noqa: E402
                    env_rank, is_float, rank_data, reduce_expected,
                    reducescatter_rows, report)

import hbcore as hb  # noqa: E402

KINDS = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]
REDUCE_OPS = ["Average", "Sum", "Min", "Max", "Product"]


def make_specs(seed: int, count: int, size: int, prefix: str,
               kinds=KINDS) -> List[Dict[str, Any]]:
    """Random tensor specs, identical on every rank (shared seed)."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(count):
        kind = kinds[int(rng.integers(len(kinds)))]
        dt = DTYPE_NAMES[int(rng.integers(len(DTYPE_NAMES)))]
        ndim = int(rng.integers(1, 4))
        trailing = tuple(int(d) for d in rng.integers(1, 4, size=ndim - 1))
        if rng.random() < 0.05 and trailing:
            trailing = trailing[:-1] + (0,)  # a zero-size trailing dim
        spec: Dict[str, Any] = {"name": "%s.%d" % (prefix, i), "kind": kind,
                                "dtype": dt, "trailing": trailing,
                                "seed": seed * 100003 + i}
        if rng.random() < 0.03:  # a big one now and then
            first = int(rng.integers(2000, 20000))
        else:
            first = int(rng.integers(0, 12))
        if kind == "allreduce":
            ops = ["Sum", "Min", "Max", "Product"] if dt == "bool" \
                else REDUCE_OPS
            spec["op"] = ops[int(rng.integers(len(ops)))]
            spec["shape"] = (first,) + trailing
            if dt != "bool" and rng.random() < 0.2:
                spec["prescale"] = 2.0 if not is_float(dt) else 0.5
                spec["postscale"] = 3.0 if not is_float(dt) else 2.0
        elif kind == "reducescatter":
            ops = ["Sum", "Min"] if dt == "bool" else \
                ["Sum", "Average", "Min", "Max"]
            spec["op"] = ops[int(rng.integers(len(ops)))]
            spec["shape"] = (int(rng.integers(0, 3 * size + 2)),) + trailing
        elif kind == "broadcast":
            spec["root"] = int(rng.integers(size))
            spec["shape"] = (first,) + trailing
        elif kind == "allgather":
            spec["rows"] = [int(x) for x in rng.integers(0, 6, size=size)]
        elif kind == "alltoall":
            spec["splits"] = rng.integers(0, 4, size=(size, size)).tolist()
            spec["even"] = bool(rng.random() < 0.3)
        specs.append(spec)
    return specs


def _data_kind(spec) -> str:
    if spec.get("op") == "Product":
        return "positive"
    if "prescale" in spec:
        return "small"
    return "any"


def input_of(spec, r: int, size: int) -> np.ndarray:
    """Rank r's input for spec (any rank can compute it)."""
    kind = spec["kind"]
    if kind == "allgather":
        shape = (spec["rows"][r],) + spec["trailing"]
    elif kind == "alltoall":
        if spec["even"]:
            shape = (2 * size,) + spec["trailing"]
        else:
            shape = (sum(spec["splits"][r]),) + spec["trailing"]
    else:
        shape = spec["shape"]
    return rank_data(spec["seed"], r, shape, spec["dtype"], _data_kind(spec))


def submit(spec, rank: int, size: int):
    x = input_of(spec, rank, size)
    kind, name = spec["kind"], spec["name"]
    if kind == "allreduce":
        return hb.allreduce_async(
            x, name=name, op=getattr(hb, spec["op"]),
            prescale_factor=spec.get("prescale", 1.0),
            postscale_factor=spec.get("postscale", 1.0))
    if kind == "reducescatter":
        return hb.reducescatter_async(x, name=name, op=getattr(hb, spec["op"]))
    if kind == "broadcast":
        return hb.broadcast_async(x, spec["root"], name=name)
    if kind == "allgather":
        return hb.allgather_async(x, name=name)
    if kind == "alltoall":
        if spec["even"]:
            return hb.alltoall_async(x, name=name)
        return hb.alltoall_async(x, splits=spec["splits"][rank], name=name)
    raise ValueError(kind)


def expected_of(spec, rank: int, size: int):
    inputs = [input_of(spec, r, size) for r in range(size)]
    kind, dt = spec["kind"], spec["dtype"]
    if kind == "allreduce":
        return reduce_expected(inputs, dt, spec["op"],
                               spec.get("prescale", 1.0),
                               spec.get("postscale", 1.0))
    if kind == "reducescatter":
        n = spec["shape"][0]
        start, count = reducescatter_rows(n, size, rank)
        full = reduce_expected(inputs, dt, spec["op"])
        return full[start:start + count]
    if kind == "broadcast":
        return inputs[spec["root"]]
    if kind == "allgather":
        return np.concatenate(inputs)
    if kind == "alltoall":
        pieces = []
        for src in range(size):
            if spec["even"]:
                pieces.append(inputs[src][2 * rank:2 * rank + 2])
            else:
                sp = spec["splits"][src]
                start = sum(sp[:rank])
                pieces.append(inputs[src][start:start + sp[rank]])
        return np.concatenate(pieces)
    raise ValueError(kind)


def check(spec, result, rank: int, size: int) -> None:
    if spec["kind"] == "alltoall" and not spec["even"]:
        out, received = result
        want = [spec["splits"][src][rank] for src in range(size)]
        if np.asarray(received).tolist() != want:
            raise CaseFailure("%s: received_splits %s, expected %s"
                              % (spec["name"], received, want))
        result = out
    assert_close(result, expected_of(spec, rank, size), spec["dtype"],
                 "%s (%s %s)" % (spec["name"], spec["kind"], spec["dtype"]))


def run_unordered(specs, rank: int, size: int, order_seed: int) -> List[str]:
    """Submits specs async in a rank-seeded order; synchronizes all;
    returns the failures (empty when all right)."""
    order = np.random.default_rng([order_seed, rank]).permutation(len(specs))
    handles = {}
    for i in order:
        handles[int(i)] = submit(specs[int(i)], rank, size)
    failures = []
    for i, spec in enumerate(specs):
        try:
            check(spec, hb.synchronize(handles[i]), rank, size)
        except Exception as exc:  # noqa: BLE001
            failures.append("%s: %s: %s" % (spec["name"], type(exc).__name__,
                                             exc))
    return failures


def _raise_failures(failures: List[str], total: int) -> None:
    if failures:
        raise CaseFailure("%d of %d tensors wrong:\n%s" % (
            len(failures), total, "\n".join(failures[:15])))


def mode_order(checker: Checker, rank: int, size: int, count: int,
               seed: int) -> None:
    specs = make_specs(seed, count, size, "order",
                       kinds=["allreduce"] * 3 + KINDS)
    for rnd in range(2):
        checker.run("order/round%d" % rnd, lambda rnd=rnd: _raise_failures(
            run_unordered(specs, rank, size, seed + 17 * (rnd + 1)),
            len(specs)))


def mode_threads(checker: Checker, rank: int, size: int, count: int,
                 seed: int, nthreads: int = 4, timeout: float = 60) -> None:
    failures: Dict[int, List[str]] = {t: [] for t in range(nthreads)}
    done = {t: 0 for t in range(nthreads)}

    def worker(t: int) -> None:
        specs = make_specs(seed + 1000 * (t + 1), count, size, "thr%d" % t)
        # Where the thread stops to wait is the same on every rank (shared
        # seed): a rank that waits for tensors its peers only submit after
        # their own wait would deadlock by construction. Within a batch the
        # order, and the pauses, are this rank's own.
        shared = np.random.default_rng([seed, t])
        batches, current = [], []
        for i in range(len(specs)):
            current.append(i)
            if shared.random() < 0.25 or i == len(specs) - 1:
                batches.append(current)
                current = []
        rng = np.random.default_rng([seed, rank, t])
        try:
            for batch in batches:
                pending: List[Tuple[Dict[str, Any], Any]] = []
                for i in rng.permutation(batch):
                    spec = specs[int(i)]
                    if rng.random() < 0.3:
                        time.sleep(float(rng.uniform(0, 0.002)))
                    pending.append((spec, submit(spec, rank, size)))
                for s, h in pending:
                    try:
                        check(s, hb.synchronize(h), rank, size)
                    except Exception as exc:  # noqa: BLE001
                        failures[t].append("%s: %s: %s" % (
                            s["name"], type(exc).__name__, exc))
                    done[t] += 1
        except Exception as exc:  # noqa: BLE001
            failures[t].append("thread %d died: %s: %s" % (
                t, type(exc).__name__, exc))

    def run_threads():
        threads = [threading.Thread(target=worker, args=(t,), daemon=True)
                   for t in range(nthreads)]
        for th in threads:
            th.start()
        deadline = time.monotonic() + timeout
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        stuck = [t for t, th in enumerate(threads) if th.is_alive()]
        if stuck:
            raise CaseFailure("threads %s still running after %ss (deadlock?)"
                              "; tensors done per thread: %s"
                              % (stuck, timeout, done))
        all_failures = [f for t in range(nthreads) for f in failures[t]]
        _raise_failures(all_failures, nthreads * count)
        if sum(done.values()) != nthreads * count:
            raise CaseFailure("only %s tensors completed" % done)
    checker.run("threads/%d-threads" % nthreads, run_threads)


def mode_stress(checker: Checker, rank: int, size: int, count: int,
                seed: int) -> Dict[str, Any]:
    specs = make_specs(seed, count, size, "stress")
    info = {"kinds": {k: sum(1 for s in specs if s["kind"] == k)
                      for k in KINDS},
            "dtypes": sorted({s["dtype"] for s in specs})}
    start = time.monotonic()
    checker.run("stress/%d-tensors" % count, lambda: _raise_failures(
        run_unordered(specs, rank, size, seed + 1), len(specs)))
    info["seconds"] = time.monotonic() - start
    # The same names again in new orders: cached responses (or, with a
    # small HB_CACHE_CAPACITY, evictions) under the same mix.
    checker.run("stress/%d-tensors-again" % count, lambda: _raise_failures(
        run_unordered(specs, rank, size, seed + 2), len(specs)))
    return info


def main() -> None:
    mode = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else {
        "order": 50, "threads": 25, "stress": 500}[mode]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 2024
    rank = env_rank()
    checker = Checker(rank)
    hb.init()
    size = hb.size()
    result: Dict[str, Any] = {"mode": mode, "size": size}
    if mode == "order":
        mode_order(checker, rank, size, count, seed)
    elif mode == "threads":
        mode_threads(checker, rank, size, count, seed)
    elif mode == "stress":
        result.update(mode_stress(checker, rank, size, count, seed))
    else:
        raise SystemExit("unknown mode " + mode)
    hb.shutdown()
    result["ok"] = checker.all_ok
    report(result, rank)


if __name__ == "__main__":
    main()
