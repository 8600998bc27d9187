"""Rank script: the numpy API's new output arrays come from a pool
(csrc/python/host_outputs.h) and are never handed out twice while alive.

    hbrun -np N python host_outputs.py

For each out-of-place call (allreduce, grouped_allreduce, broadcast) over
arrays above the pool's threshold, three steps run with the previous
step's results still held, then checked against numpy: a block reused
while its array was alive would have been overwritten by the next step.
Then the results are dropped and one more step runs: its outputs must
reuse the dropped arrays' memory (the addresses come back) and be right.
Every rank reports what it saw; the test asserts on all of them.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, env_size, exc_info, report  # noqa: E402

import hbcore as hb  # noqa: E402

COUNT = 300_000  # float32: 1.2 MB, above the pool's threshold


def rank_input(step: int, rank: int, i: int = 0) -> np.ndarray:
    """What rank `rank` contributes at `step` (tensor `i` of a group)."""
    return np.arange(COUNT, dtype=np.float32) * (i + 1) + 1000 * step + rank


def call(kind: str, step: int, rank: int):
    if kind == "allreduce":
        return [hb.allreduce(rank_input(step, rank), op=hb.Sum,
                             name="ho.ar.%d" % step)]
    if kind == "grouped_allreduce":
        return hb.grouped_allreduce(
            [rank_input(step, rank, i) for i in range(3)], op=hb.Sum,
            name="ho.gar.%d" % step)
    return [hb.broadcast(rank_input(step, rank), root_rank=1,
                         name="ho.bc.%d" % step)]


def expected(kind: str, step: int, size: int):
    if kind == "allreduce":
        return [sum(rank_input(step, r) for r in range(size))]
    if kind == "grouped_allreduce":
        return [sum(rank_input(step, r, i) for r in range(size))
                for i in range(3)]
    return [rank_input(step, 1)]


def run_kind(kind: str, rank: int, size: int) -> dict:
    held = {}
    for step in range(3):
        held[step] = call(kind, step, rank)
    wrong = [step for step in range(3)
             if not all(np.array_equal(a, e) for a, e in
                        zip(held[step], expected(kind, step, size)))]
    addresses = {a.ctypes.data for arrays in held.values() for a in arrays}
    distinct = len(addresses) == sum(len(v) for v in held.values())
    held.clear()
    again = call(kind, 3, rank)
    return {
        "wrong_steps": wrong,
        "distinct_while_alive": distinct,
        "reused_after_drop": all(a.ctypes.data in addresses for a in again),
        "last_right": all(np.array_equal(a, e) for a, e in
                          zip(again, expected(kind, 3, size))),
        "writeable": all(a.flags.writeable and a.flags.c_contiguous
                         for a in again),
    }


def main() -> None:
    rank, size = env_rank(), env_size()
    result = {}
    try:
        hb.init()
        for kind in ("allreduce", "grouped_allreduce", "broadcast"):
            result[kind] = run_kind(kind, rank, size)
        hb.shutdown()
    except Exception as e:  # noqa: BLE001 - reported, asserted by the test
        result["error"] = exc_info(e)
    report(result)


if __name__ == "__main__":
    main()
