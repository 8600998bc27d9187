"""Rank script: the numpy API's new output arrays come from a pool
(csrc/python/host_outputs.h) and are never handed out twice while alive.

    hbrun -np N python host_outputs.py

For each out-of-place call over arrays above the pool's threshold -- those
whose output is made before submission (allreduce, grouped_allreduce,
broadcast) and those whose output the core allocates once the shape is
negotiated (allgather with uneven rows, grouped_allgather, alltoall with
uneven splits, reducescatter) -- three steps run with the previous step's
results still held, then checked against numpy: a block reused while its
array was alive would have been overwritten by the next step.
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
WIDTH = 1000     # columns of the row-wise collectives' inputs
ROWS = 40        # base row count: 160 KB per block, above the threshold

KINDS = ("allreduce", "grouped_allreduce", "broadcast", "allgather",
         "grouped_allgather", "alltoall", "reducescatter")


def rank_input(step: int, rank: int, i: int = 0) -> np.ndarray:
    """What rank `rank` contributes at `step` (tensor `i` of a group)."""
    return np.arange(COUNT, dtype=np.float32) * (i + 1) + 1000 * step + rank


def rows_input(step: int, rank: int, rows: int, tag: int = 0) -> np.ndarray:
    """A (rows, WIDTH) block of rank `rank` at `step`; `tag` tells blocks
    of one rank apart."""
    base = np.arange(rows * WIDTH, dtype=np.float32).reshape(rows, WIDTH)
    return base + 1000 * step + 100 * rank + 10 * tag


def alltoall_rows(source: int, dest: int) -> int:
    """Rows rank `source` sends to rank `dest` (uneven both ways)."""
    return ROWS + dest + 2 * source


def call(kind: str, step: int, rank: int, size: int):
    if kind == "allgather":
        return [hb.allgather(rows_input(step, rank, ROWS + rank),
                             name="ho.ag.%d" % step)]
    if kind == "grouped_allgather":
        return hb.grouped_allgather(
            [rows_input(step, rank, ROWS + rank, i) for i in range(2)],
            name="ho.gag.%d" % step)
    if kind == "alltoall":
        splits = [alltoall_rows(rank, j) for j in range(size)]
        blocks = [rows_input(step, rank, n, j) for j, n in enumerate(splits)]
        out, received = hb.alltoall(np.concatenate(blocks), splits=splits,
                                    name="ho.a2a.%d" % step)
        return [out]
    if kind == "reducescatter":
        return [hb.reducescatter(rows_input(step, rank, ROWS * size),
                                 op=hb.Sum, name="ho.rs.%d" % step)]
    if kind == "allreduce":
        return [hb.allreduce(rank_input(step, rank), op=hb.Sum,
                             name="ho.ar.%d" % step)]
    if kind == "grouped_allreduce":
        return hb.grouped_allreduce(
            [rank_input(step, rank, i) for i in range(3)], op=hb.Sum,
            name="ho.gar.%d" % step)
    return [hb.broadcast(rank_input(step, rank), root_rank=1,
                         name="ho.bc.%d" % step)]


def expected(kind: str, step: int, rank: int, size: int):
    if kind == "allgather":
        return [np.concatenate([rows_input(step, r, ROWS + r)
                                for r in range(size)])]
    if kind == "grouped_allgather":
        return [np.concatenate([rows_input(step, r, ROWS + r, i)
                                for r in range(size)]) for i in range(2)]
    if kind == "alltoall":
        return [np.concatenate([rows_input(step, r, alltoall_rows(r, rank),
                                           rank) for r in range(size)])]
    if kind == "reducescatter":
        total = sum(rows_input(step, r, ROWS * size) for r in range(size))
        return [total[rank * ROWS:(rank + 1) * ROWS]]
    if kind == "allreduce":
        return [sum(rank_input(step, r) for r in range(size))]
    if kind == "grouped_allreduce":
        return [sum(rank_input(step, r, i) for r in range(size))
                for i in range(3)]
    return [rank_input(step, 1)]


def run_kind(kind: str, rank: int, size: int) -> dict:
    held = {}
    for step in range(3):
        held[step] = call(kind, step, rank, size)
    wrong = [step for step in range(3)
             if not all(np.array_equal(a, e) for a, e in
                        zip(held[step], expected(kind, step, rank, size)))]
    addresses = {a.ctypes.data for arrays in held.values() for a in arrays}
    distinct = len(addresses) == sum(len(v) for v in held.values())
    held.clear()
    again = call(kind, 3, rank, size)
    return {
        "wrong_steps": wrong,
        "distinct_while_alive": distinct,
        "reused_after_drop": all(a.ctypes.data in addresses for a in again),
        "last_right": all(np.array_equal(a, e) for a, e in
                          zip(again, expected(kind, 3, rank, size))),
        "writeable": all(a.flags.writeable and a.flags.c_contiguous
                         for a in again),
    }


def main() -> None:
    rank, size = env_rank(), env_size()
    result = {}
    try:
        hb.init()
        for kind in KINDS:
            result[kind] = run_kind(kind, rank, size)
        hb.shutdown()
    except Exception as e:  # noqa: BLE001 - reported, asserted by the test
        result["error"] = exc_info(e)
    report(result)


if __name__ == "__main__":
    main()
