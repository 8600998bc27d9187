"""Rank script: edge cases of the hbcore_tf collectives, checked against
numpy on every rank, eagerly, in a tf.function and in a tf.compat.v1
Session.run.

    hbrun -np N python tf_ops_edges.py

Cases (``<case>/<mode>``, CASES x MODES):

- a2a-float-splits: alltoall with floating-point splits raises TypeError
  (naming the dtype) on every rank before any op exists, as Horovod's
  int32-only splits input does; whole-number floats were truncated to
  int64 and accepted, fractional ones silently sent the truncated rows;
- a2a-int32-splits-tensor: an int32 splits tensor (Horovod's type) works;
  the received splits match numpy;
- zero-elements: allreduce, grouped_allreduce, allgather (0 rows on every
  rank and on rank 0 only), broadcast, alltoall and reducescatter of
  tensors with no elements;
- rs-fewer-rows: reducescatter of fewer rows than ranks (the last ranks
  get empty blocks), float Sum and integer Average;
- int-scaled: fractional prescale / postscale factors on integers (scaled
  per rank before the sum, truncated toward zero, as Horovod);
- grads-edges: gradients of alltoall without splits, of reducescatter of
  fewer rows than ranks and of allgather with 0 rows on rank 0;
- recovered (eager only): the runtime still works after the errors.
"""
import os
import sys
from typing import Any, Callable, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "rank_scripts"))
from common import (Checker, assert_close, env_rank,  # noqa: E402
                    env_size, expect_raises, rank_data,
                    reducescatter_rows, report)
import op_table  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import hbcore_tf as hvd  # noqa: E402

MODES = ["eager", "function", "graph"]
CASES = ["a2a-float-splits", "a2a-int32-splits-tensor", "zero-elements",
         "rs-fewer-rows", "int-scaled", "grads-edges"]

RANK, SIZE = env_rank(), env_size()
check = Checker(RANK)


def in_mode(mode: str, build: Callable[[], Any]) -> Any:
    """Builds ``build()``'s collectives and returns their numpy values:
    eagerly, traced in a tf.function, or in a tf.compat.v1 graph run by a
    Session."""
    if mode == "eager":
        return tf.nest.map_structure(np.asarray, build())
    if mode == "function":
        return tf.nest.map_structure(
            np.asarray, tf.function(build, autograph=False)())
    with tf.Graph().as_default():
        outputs = build()
        with tf.compat.v1.Session() as sess:
            return sess.run(outputs)


def gradient(mode: str, fn: Callable[[Any], Any], x: np.ndarray,
             w: np.ndarray) -> np.ndarray:
    """d sum(fn(x) * w) / dx on this rank in ``mode``, densified."""
    def body() -> Any:
        x_t = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x_t)
            loss = tf.reduce_sum(fn(x_t) * w)
        return tf.convert_to_tensor(tape.gradient(loss, x_t))

    if mode != "graph":
        return in_mode(mode, body)
    with tf.Graph().as_default():
        x_t = tf.constant(x)
        loss = tf.reduce_sum(fn(x_t) * w)
        (g,) = tf.compat.v1.gradients(loss, [x_t])
        g = tf.convert_to_tensor(g)
        with tf.compat.v1.Session() as sess:
            return sess.run(g)


def a2a_float_splits(mode: str) -> None:
    # Whole-number floats were cast to int64 and accepted before the fix;
    # fractional ones were truncated (here to [2, 0, ...]) and then failed
    # on the sum with a message naming the truncated splits.
    for splits in ([1.0] * SIZE, np.ones(SIZE, np.float64),
                   [2.5] + [0.5] * (SIZE - 1)):
        rows = int(np.sum(splits))

        def build(splits: Any = splits, rows: int = rows) -> Callable:
            return lambda: hvd.alltoall(
                tf.zeros([rows, 2]), splits=tf.constant(splits)
                if mode == "function" else splits)
        expect_raises(lambda: in_mode(mode, build()), TypeError, "splits",
                      "integer", "float")


def a2a_int32_splits_tensor(mode: str) -> None:
    splits = [op_table.splits_of(s, SIZE) for s in range(SIZE)]
    key = "edges/a2a-int32/%s" % mode
    inputs = [rank_data(op_table.seed(key), s, (sum(splits[s]), 3),
                        "float32") for s in range(SIZE)]
    out, received = in_mode(mode, lambda: hvd.alltoall(
        tf.constant(inputs[RANK]),
        splits=tf.constant(splits[RANK], tf.int32)))
    pieces = []
    for s in range(SIZE):
        start = sum(splits[s][:RANK])
        pieces.append(inputs[s][start:start + splits[s][RANK]])
    assert_close(np.asarray(out), np.concatenate(pieces), "float32",
                 "alltoall output")
    assert_close(np.asarray(received),
                 np.array([splits[s][RANK] for s in range(SIZE)], np.int32),
                 "int32", "received splits")


def zero_elements(mode: str) -> None:
    def build() -> List[Any]:
        return [
            hvd.allreduce(tf.zeros([0, 3])),
            hvd.grouped_allreduce([tf.zeros([0], tf.int32),
                                   tf.ones([2], tf.int32)], op=hvd.Sum),
            hvd.allgather(tf.zeros([0, 3], tf.float64)),
            hvd.allgather(tf.fill([0 if RANK == 0 else RANK, 2], RANK)),
            hvd.broadcast(tf.zeros([3, 0], tf.int8), SIZE - 1),
            hvd.alltoall(tf.zeros([0, 2])),
            hvd.alltoall(tf.zeros([0, 2]), splits=[0] * SIZE),
            hvd.reducescatter(tf.zeros([0, 2]), op=hvd.Sum),
        ]
    (ar, grouped, ag_all, ag_r0, bcast, a2a, (a2a_s, a2a_rs),
     rs) = in_mode(mode, build)
    assert_close(ar, np.zeros([0, 3], np.float32), "float32", "allreduce")
    assert_close(grouped[0], np.zeros([0], np.int32), "int32", "grouped 0")
    assert_close(grouped[1], np.full([2], SIZE, np.int32), "int32",
                 "grouped 1")
    assert_close(ag_all, np.zeros([0, 3]), "float64", "allgather all 0")
    exp = np.concatenate([np.full([0 if r == 0 else r, 2], r, np.int32)
                          for r in range(SIZE)])
    assert_close(ag_r0, exp, "int32", "allgather 0 rows on rank 0")
    assert_close(bcast, np.zeros([3, 0], np.int8), "int8", "broadcast")
    assert_close(a2a, np.zeros([0, 2], np.float32), "float32", "alltoall")
    assert_close(a2a_s, np.zeros([0, 2], np.float32), "float32",
                 "alltoall splits")
    assert_close(a2a_rs, np.zeros([SIZE], np.int32), "int32",
                 "alltoall received")
    assert_close(rs, np.zeros([0, 2], np.float32), "float32",
                 "reducescatter")


def rs_fewer_rows(mode: str) -> None:
    n = SIZE - 1  # rank SIZE - 1 gets no rows
    key = "edges/rs-fewer/%s" % mode
    xs = [rank_data(op_table.seed(key), r, (n, 2), "float32")
          for r in range(SIZE)]
    ints = [rank_data(op_table.seed(key, "i"), r, (n,), "int32")
            for r in range(SIZE)]
    got_f, got_i = in_mode(mode, lambda: [
        hvd.reducescatter(tf.constant(xs[RANK]), op=hvd.Sum),
        hvd.reducescatter(tf.constant(ints[RANK]), op=hvd.Average)])
    start, count = reducescatter_rows(n, SIZE, RANK)
    assert_close(got_f, np.sum(xs, axis=0)[start:start + count], "float32",
                 "float Sum")
    total = np.sum(np.asarray(ints, np.int64), axis=0)
    avg = (np.sign(total) * (np.abs(total) // SIZE)).astype(np.int32)
    assert_close(got_i, avg[start:start + count], "int32", "int Average")


def int_scaled(mode: str) -> None:
    x = np.array([3, 5, -3, 7], np.int32) * (RANK + 1)
    all_x = [np.array([3, 5, -3, 7], np.int64) * (r + 1)
             for r in range(SIZE)]
    pre, post = in_mode(mode, lambda: [
        hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=0.5),
        hvd.allreduce(tf.constant(x), op=hvd.Sum, postscale_factor=0.5)])
    # Horovod: each rank's input is scaled (in double) and truncated
    # toward zero before the sum; the postscale truncates the sum.
    exp_pre = np.sum([np.trunc(v * 0.5) for v in all_x], axis=0)
    exp_post = np.trunc(np.sum(all_x, axis=0) * 0.5)
    assert_close(pre, exp_pre.astype(np.int32), "int32", "prescale 0.5")
    assert_close(post, exp_post.astype(np.int32), "int32", "postscale 0.5")


def grads_edges(mode: str) -> None:
    # alltoall without splits: 2 rows to each rank.
    key = "edges/grads/%s" % mode
    ws = [rank_data(op_table.seed(key, "a2a"), r, (2 * SIZE,), "float32")
          for r in range(SIZE)]
    x = rank_data(op_table.seed(key, "x"), RANK, (2 * SIZE,), "float32")
    got = gradient(mode, hvd.alltoall, x, ws[RANK])
    # rows 2d, 2d+1 of this rank went to rank d, landing at 2 * RANK there.
    exp = np.concatenate([ws[d][2 * RANK:2 * RANK + 2] for d in range(SIZE)])
    assert_close(got, exp, "float32", "alltoall without splits")

    # reducescatter (Sum) of SIZE - 1 rows: the last rank's block is empty.
    n = SIZE - 1
    blocks = [reducescatter_rows(n, SIZE, r) for r in range(SIZE)]
    ws = [rank_data(op_table.seed(key, "rs"), r, (blocks[r][1], 2),
                    "float32") for r in range(SIZE)]
    x = rank_data(op_table.seed(key, "rsx"), RANK, (n, 2), "float32")
    got = gradient(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum), x,
                   ws[RANK])
    assert_close(got, np.concatenate(ws) * SIZE, "float32",
                 "reducescatter of fewer rows")

    # allgather with no rows on rank 0.
    rows = [0 if r == 0 else r for r in range(SIZE)]
    ws = [rank_data(op_table.seed(key, "ag"), r, (sum(rows), 2), "float32")
          for r in range(SIZE)]
    x = rank_data(op_table.seed(key, "agx"), RANK, (rows[RANK], 2),
                  "float32")
    got = gradient(mode, hvd.allgather, x, ws[RANK])
    start = sum(rows[:RANK])
    assert_close(got, np.mean(ws, axis=0)[start:start + rows[RANK]],
                 "float32", "allgather with 0 rows on rank 0")


TABLE = {"a2a-float-splits": a2a_float_splits,
         "a2a-int32-splits-tensor": a2a_int32_splits_tensor,
         "zero-elements": zero_elements, "rs-fewer-rows": rs_fewer_rows,
         "int-scaled": int_scaled, "grads-edges": grads_edges}


def main() -> None:
    hvd.init()
    assert sorted(TABLE) == sorted(CASES), "CASES and TABLE differ"
    for case in CASES:
        for mode in MODES:
            check.run("%s/%s" % (case, mode),
                      lambda case=case, mode=mode: TABLE[case](mode))

    def recovered() -> None:
        out = hvd.allreduce(tf.constant([float(RANK)]), op=hvd.Sum,
                            name="edges.recovered")
        assert_close(np.asarray(out),
                     np.array([sum(range(SIZE))], np.float32), "float32",
                     "allreduce after the errors")
    check.run("recovered", recovered)
    hvd.shutdown()
    report({"rank": RANK, "size": SIZE,
            "failed": [k for k, v in check.results.items() if not v["ok"]]})


if __name__ == "__main__":
    main()
