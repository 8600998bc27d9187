"""Rank script: the gradient of every hbcore_tf collective, checked against
numpy on every rank, in three modes.

    hbrun -np N python tf_grads.py

Modes (case names ``grad/<mode>/<case>``):

- eager:    tf.GradientTape, op by op;
- function: the tape inside a tf.function;
- graph:    tf.compat.v1.gradients in a tf.Graph run by a v1 Session, the
            mode where grappler constant-folds and prunes: a gradient that
            lets it drop a collective on some ranks (e.g. zeros_like of a
            collective's result) hangs the ranks that still run it.

Every case computes loss_r = sum(y_r * w_r) on rank r for y = op(x_r),
with x and w rank-seeded, and compares d loss / d x_r with Horovod 0.28's
gradient computed with numpy from every rank's recomputed w. Broadcast
runs with root 0 and with a non-zero root (size - 1), so the root is not
the rank the coordinator lives on. Inputs are graph constants in graph
mode, which gives grappler the most to fold.
"""
import os
import sys
from typing import Any, Callable, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "rank_scripts"))
from common import (Checker, assert_close, env_rank, env_size,  # noqa: E402
                    rank_data, reducescatter_rows, report)
import op_table  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import hbcore_tf as hvd  # noqa: E402

MODES = ["eager", "function", "graph"]
CASES = ["allreduce-sum", "allreduce-average", "allreduce-scaled",
         "allreduce-sparse-upstream-sum", "allreduce-sparse-upstream-average",
         "allreduce-sparse-upstream-scaled",
         "grouped_allreduce", "allgather", "broadcast-root0",
         "broadcast-rootlast", "alltoall", "reducescatter-sum",
         "reducescatter-average"]

RANK, SIZE = env_rank(), env_size()
F32 = "float32"
check = Checker(RANK)


def gradient(mode: str, fn: Callable[[Any], Any], x: np.ndarray,
             w: np.ndarray) -> np.ndarray:
    """d sum(fn(x) * w) / dx on this rank, computed in ``mode``, densified.

    Args:
        mode: "eager", "function" or "graph".
        fn: builds the collective's output from the input tensor.
        x, w: this rank's input and upstream weights.
    """
    def body(x_t: Any, w_t: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x_t)
            loss = tf.reduce_sum(fn(x_t) * w_t)
        return tf.convert_to_tensor(tape.gradient(loss, x_t))

    if mode == "eager":
        return body(tf.constant(x), tf.constant(w)).numpy()
    if mode == "function":
        return tf.function(body)(tf.constant(x), tf.constant(w)).numpy()
    with tf.Graph().as_default():
        x_t, w_t = tf.constant(x), tf.constant(w)
        loss = tf.reduce_sum(fn(x_t) * w_t)
        (g,) = tf.compat.v1.gradients(loss, [x_t])
        g = tf.convert_to_tensor(g)
        with tf.compat.v1.Session() as sess:
            return sess.run(g)


def weights(key: str, shapes: List[Any]) -> List[np.ndarray]:
    """Every rank's upstream weights w_r (rank r's shape is shapes[r])."""
    return [rank_data(op_table.seed(key, "w"), r, shapes[r], F32)
            for r in range(SIZE)]


def sparse_rows(r: int) -> List[int]:
    """The rows rank r gathers (a duplicate on purpose)."""
    return [r % 6, (r + 2) % 6, r % 6]


def case_table(mode: str) -> Dict[str, Callable[[], None]]:
    """Case name -> a function that checks one gradient in ``mode``."""
    def key(case: str) -> str:
        return "grad/%s/%s" % (mode, case)

    def allreduce(case: str, op: str, pre: float = 1.0,
                  post: float = 1.0) -> None:
        x = rank_data(op_table.seed(key(case)), RANK, (4, 3), F32)
        ws = weights(key(case), [(4, 3)] * SIZE)
        got = gradient(mode, lambda t: hvd.allreduce(
            t, op=getattr(hvd, op), prescale_factor=pre,
            postscale_factor=post), x, ws[RANK])
        total = np.sum(ws, axis=0) * pre * post
        expected = total / SIZE if op == "Average" else total
        assert_close(got, expected.astype(np.float32), F32, key(case))

    def sparse_upstream(case: str, op: str, pre: float = 1.0,
                        post: float = 1.0) -> None:
        # y = allreduce(x); loss uses tf.gather(y, rows_r): the upstream
        # gradient is IndexedSlices, reduced by the sparse (allgather) path
        # (densified first when scale factors apply).
        x = rank_data(op_table.seed(key(case)), RANK, (6, 2), F32)
        ws = weights(key(case), [(3, 2)] * SIZE)
        got = gradient(mode, lambda t: tf.gather(
            hvd.allreduce(t, op=getattr(hvd, op), prescale_factor=pre,
                          postscale_factor=post), sparse_rows(RANK)), x,
            ws[RANK])
        expected = np.zeros((6, 2))
        for r in range(SIZE):
            np.add.at(expected, sparse_rows(r), ws[r])
        if op == "Average":
            expected /= SIZE
        expected *= pre * post
        assert_close(got, expected.astype(np.float32), F32, key(case))

    def grouped() -> None:
        x = rank_data(op_table.seed(key("grouped")), RANK, (6,), F32)
        ws = weights(key("grouped"), [(6,)] * SIZE)
        got = gradient(mode, lambda t: tf.concat(hvd.grouped_allreduce(
            [t[:2], t[2:]], op=hvd.Average), 0), x, ws[RANK])
        assert_close(got, np.mean(ws, axis=0).astype(np.float32), F32,
                     key("grouped"))

    def allgather() -> None:
        rows = [r + 1 for r in range(SIZE)]
        x = rank_data(op_table.seed(key("allgather")), RANK, (rows[RANK], 3),
                      F32)
        ws = weights(key("allgather"), [(sum(rows), 3)] * SIZE)
        got = gradient(mode, hvd.allgather, x, ws[RANK])
        start = sum(rows[:RANK])
        # Horovod 0.28: the output gradient is averaged over ranks.
        expected = np.mean(ws, axis=0)[start:start + rows[RANK]]
        assert_close(got, expected.astype(np.float32), F32, key("allgather"))

    def broadcast(case: str, root: int) -> None:
        x = rank_data(op_table.seed(key(case)), RANK, (5,), F32)
        ws = weights(key(case), [(5,)] * SIZE)
        got = gradient(mode, lambda t: hvd.broadcast(t, root), x, ws[RANK])
        # Horovod 0.28: the averaged output gradient on the root, zeros on
        # the other ranks (which still take part in the allreduce).
        expected = np.mean(ws, axis=0) if RANK == root else np.zeros(5)
        assert_close(got, expected.astype(np.float32), F32, key(case))

    def alltoall() -> None:
        sp = [op_table.splits_of(s, SIZE) for s in range(SIZE)]
        received = [sum(sp[s][d] for s in range(SIZE)) for d in range(SIZE)]
        x = rank_data(op_table.seed(key("alltoall")), RANK,
                      (sum(sp[RANK]), 2), F32)
        ws = weights(key("alltoall"), [(received[d], 2) for d in range(SIZE)])
        got = gradient(mode, lambda t: hvd.alltoall(t, splits=sp[RANK])[0],
                       x, ws[RANK])
        pieces = []
        for d in range(SIZE):  # rows this rank sent to d, in d's output
            offset = sum(sp[s][d] for s in range(RANK))
            pieces.append(ws[d][offset:offset + sp[RANK][d]])
        assert_close(got, np.concatenate(pieces).astype(np.float32), F32,
                     key("alltoall"))

    def reducescatter(case: str, op: str) -> None:
        n = 2 * SIZE + 1
        blocks = [reducescatter_rows(n, SIZE, r) for r in range(SIZE)]
        x = rank_data(op_table.seed(key(case)), RANK, (n, 2), F32)
        ws = weights(key(case), [(blocks[r][1], 2) for r in range(SIZE)])
        got = gradient(mode, lambda t: hvd.reducescatter(
            t, op=getattr(hvd, op)), x, ws[RANK])
        # Horovod 0.28: allgather of the gradient, times size() for Sum.
        expected = np.concatenate(ws) * (SIZE if op == "Sum" else 1)
        assert_close(got, expected.astype(np.float32), F32, key(case))

    return {
        "allreduce-sum": lambda: allreduce("allreduce-sum", "Sum"),
        "allreduce-average": lambda: allreduce("allreduce-average", "Average"),
        "allreduce-scaled": lambda: allreduce("allreduce-scaled", "Sum", 0.5,
                                              3.0),
        "allreduce-sparse-upstream-sum": lambda: sparse_upstream(
            "allreduce-sparse-upstream-sum", "Sum"),
        "allreduce-sparse-upstream-average": lambda: sparse_upstream(
            "allreduce-sparse-upstream-average", "Average"),
        "allreduce-sparse-upstream-scaled": lambda: sparse_upstream(
            "allreduce-sparse-upstream-scaled", "Sum", 0.5, 3.0),
        "grouped_allreduce": grouped,
        "allgather": allgather,
        "broadcast-root0": lambda: broadcast("broadcast-root0", 0),
        "broadcast-rootlast": lambda: broadcast("broadcast-rootlast",
                                                SIZE - 1),
        "alltoall": alltoall,
        "reducescatter-sum": lambda: reducescatter("reducescatter-sum", "Sum"),
        "reducescatter-average": lambda: reducescatter(
            "reducescatter-average", "Average"),
    }


def main() -> None:
    hvd.init()
    for mode in MODES:
        table = case_table(mode)
        assert sorted(table) == sorted(CASES), "CASES and the table differ"
        for case in CASES:
            check.run("grad/%s/%s" % (mode, case), table[case])
    hvd.shutdown()
    report({"rank": RANK, "size": SIZE,
            "failed": [k for k, v in check.results.items() if not v["ok"]]})


if __name__ == "__main__":
    main()
