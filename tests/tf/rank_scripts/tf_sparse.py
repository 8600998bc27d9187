"""Rank script: allreduce of tf.IndexedSlices (Horovod's semantics: an
allgather of values and indices; Average divides the values by size with
true division), checked against numpy on every rank.

    hbrun -np N python tf_sparse.py      # TF_USE_LEGACY_KERAS=1: tf_keras

Cases (``case_names()``):

- allreduce/<dtype>/<op>/<mode>: one IndexedSlices, Sum and Average, float
  and integer values (an integer Average comes back as float32 values for
  8/16-bit integers, float64 for 32/64-bit, and entries sharing an index,
  within a rank and across ranks, add up to the exact average), eagerly,
  in a tf.function and in a tf.compat.v1 Session.run;
- grouped-mixed/<op>/<mode>: grouped_allreduce of dense tensors and
  IndexedSlices interleaved, float and integer (a dense integer Average
  keeps its dtype and truncates toward zero; sparse ones do not);
- gather-gradient/<mode>: the IndexedSlices gradient of tf.gather;
- tape-predivide: DistributedGradientTape(gradient_predivide_factor=2)
  with a dense and a sparse gradient;
- errors/*: pre/postscale factors and Min/Max raise NotImplementedError
  with Horovod's message, Average of bool values TypeError, before any op
  exists; the runtime still works.
"""
import os
import sys
from typing import Any, Callable, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "rank_scripts"))
from common import (CaseFailure, Checker, assert_close,  # noqa: E402
                    env_rank, env_size, expect_raises, is_float, rank_data,
                    report)
import op_table  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

MODES = ["eager", "function", "graph"]
# Horovod's test_horovod_*allreduce_indexed_slices_average_cpu dtypes, and
# int16.
DTYPES = ["float16", "float32", "float64", "uint8", "int8", "int16", "int32",
          "int64"]
OPS = ["Sum", "Average"]
ROWS = 6  # dense_shape[0] of every IndexedSlices here
OTHER_CASES = ["tape-predivide", "errors/prescale-allreduce",
               "errors/postscale-allreduce", "errors/prescale-grouped-mixed",
               "errors/scale-graph-creates-nothing", "errors/min-allreduce",
               "errors/max-grouped", "errors/average-bool",
               "errors/recovered"]
# The dtype of an IndexedSlices Average's values: TensorFlow's true
# division (tf.math.truediv's documented table) keeps floating dtypes and
# turns 8/16-bit integers into float32, 32/64-bit ones into float64.
AVERAGE_DTYPE = {"uint8": "float32", "int8": "float32", "int16": "float32",
                 "int32": "float64", "int64": "float64"}
# grouped-mixed's inputs, in order: (kind, dtype).
MIXED = [("dense", "float32"), ("sparse", "float32"), ("dense", "float64"),
         ("sparse", "int32"), ("dense", "int32"), ("sparse", "uint8"),
         ("dense", "int64"), ("sparse", "int8"), ("sparse", "int16"),
         ("sparse", "int64")]


def case_names() -> List[str]:
    """Every case this script runs, in order (the pytest side rebuilds the
    list from the literal lists above)."""
    return (["allreduce/%s/%s/%s" % (dt, op, mode) for dt in DTYPES
             for op in OPS for mode in MODES]
            + ["grouped-mixed/%s/%s" % (op, mode) for op in OPS
               for mode in MODES]
            + ["gather-gradient/%s" % mode for mode in MODES] + OTHER_CASES)


RANK, SIZE = env_rank(), env_size()
check = Checker(RANK)
SCALE_MESSAGE = "Pre/postscale_factor are not supported with tf.IndexedSlices"


def rows_of(r: int) -> List[int]:
    """The indices of rank r's slices: a duplicate within the rank, and
    one shared with rank r + 1 (so duplicates cross ranks at 2 ranks)."""
    return [r % ROWS, (r + 1) % ROWS, r % ROWS]


def slices_data(seed: int, r: int, dtype: str) -> np.ndarray:
    return rank_data(seed, r, (3, 2), dtype)


def result_dtype(dtype: str, op: str) -> str:
    """The dtype of the reduced IndexedSlices' values."""
    return AVERAGE_DTYPE.get(dtype, dtype) if op == "Average" else dtype


def expected_slices(seed: int, dtype: str, op: str
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, indices, dense) of the reduced IndexedSlices: every rank's
    slices in rank order, each value divided by size for Average (in
    float64, then rounded to the result's dtype)."""
    values = np.concatenate([slices_data(seed, r, dtype)
                             for r in range(SIZE)])
    if op == "Average":
        values = (values.astype(np.float64) / SIZE).astype(
            result_dtype(dtype, op))
    indices = np.concatenate([rows_of(r) for r in range(SIZE)]).astype(
        np.int64)
    dense = np.zeros((ROWS, 2), values.dtype)
    np.add.at(dense, indices, values)
    return values, indices, dense


def in_mode(mode: str, build: Callable[[], List[Any]]) -> List[np.ndarray]:
    """Runs ``build`` (which makes tensors from constants and returns a
    flat list of result tensors) eagerly, in a tf.function or in a v1
    Session.run, and returns the numpy results."""
    if mode == "eager":
        return [t.numpy() for t in build()]
    if mode == "function":
        return [t.numpy() for t in tf.function(build)()]
    with tf.Graph().as_default():
        outs = build()
        with tf.compat.v1.Session() as sess:
            return sess.run(outs)


def flatten(result: Any) -> List[Any]:
    """IndexedSlices -> [values, indices, dense]; tensors as they are."""
    if isinstance(result, tf.IndexedSlices):
        return [result.values, tf.cast(result.indices, tf.int64),
                tf.convert_to_tensor(result)]
    return [result]


def check_slices(got: Sequence[np.ndarray], seed: int, dtype: str, op: str,
                 what: str) -> None:
    values, indices, dense = expected_slices(seed, dtype, op)
    out_dtype = result_dtype(dtype, op)
    assert_close(np.asarray(got[0]), values, out_dtype, what + " values")
    assert_close(np.asarray(got[1]), indices, "int64", what + " indices")
    assert_close(np.asarray(got[2]), dense, out_dtype, what + " dense")


def my_slices(seed: int, dtype: str) -> tf.IndexedSlices:
    return tf.IndexedSlices(tf.constant(slices_data(seed, RANK, dtype)),
                            tf.constant(rows_of(RANK), tf.int64),
                            dense_shape=tf.constant([ROWS, 2], tf.int64))


def allreduce_case(dtype: str, op: str, mode: str) -> None:
    name = "allreduce/%s/%s/%s" % (dtype, op, mode)
    seed = op_table.seed(name)

    def build():
        out = hvd.allreduce(my_slices(seed, dtype), op=getattr(hvd, op))
        if not isinstance(out, tf.IndexedSlices):
            raise CaseFailure("result is %s, not IndexedSlices" % type(out))
        return flatten(out)
    check_slices(in_mode(mode, build), seed, dtype, op, name)


def dense_average_np(stack: np.ndarray, dtype: str) -> np.ndarray:
    """A dense Average: the sum over ranks divided by size, truncated
    toward zero for integers (the dtype is kept)."""
    mean = stack.astype(np.float64).sum(0) / SIZE
    return (mean if is_float(dtype) else np.trunc(mean)).astype(dtype)


def grouped_mixed_case(op: str, mode: str) -> None:
    name = "grouped-mixed/%s/%s" % (op, mode)
    seeds = [op_table.seed(name, i) for i in range(len(MIXED))]
    dense_in = {i: rank_data(seeds[i], RANK, (4,), dt)
                for i, (kind, dt) in enumerate(MIXED) if kind == "dense"}

    def build():
        outs = hvd.grouped_allreduce(
            [tf.constant(dense_in[i]) if kind == "dense"
             else my_slices(seeds[i], dt)
             for i, (kind, dt) in enumerate(MIXED)], op=getattr(hvd, op))
        kinds = ["sparse" if isinstance(o, tf.IndexedSlices) else "dense"
                 for o in outs]
        if kinds != [kind for kind, _ in MIXED]:
            raise CaseFailure("output kinds %s" % kinds)
        return [t for o in outs for t in flatten(o)]
    got = in_mode(mode, build)
    at = 0
    for i, (kind, dt) in enumerate(MIXED):
        what = "%s %s %d" % (name, kind, i)
        if kind == "sparse":
            check_slices(got[at:at + 3], seeds[i], dt, op, what)
            at += 3
            continue
        stack = np.stack([rank_data(seeds[i], r, (4,), dt)
                          for r in range(SIZE)])
        exp = (dense_average_np(stack, dt) if op == "Average"
               else stack.sum(0).astype(dt))
        assert_close(np.asarray(got[at]), exp, dt, what)
        at += 1


def gather_gradient_case(mode: str) -> None:
    name = "gather-gradient/%s" % mode
    w = [rank_data(op_table.seed(name), r, (3, 2), "float32")
         for r in range(SIZE)]

    def build():
        v = tf.zeros([ROWS, 2])
        with tf.GradientTape() as tape:
            tape.watch(v)
            loss = tf.reduce_sum(tf.gather(v, rows_of(RANK)) * w[RANK])
        g = tape.gradient(loss, v)
        if not isinstance(g, tf.IndexedSlices):
            raise CaseFailure("tf.gather's gradient is %s" % type(g))
        return [tf.convert_to_tensor(hvd.allreduce(g))]
    got = in_mode(mode, build)[0]
    dense = np.zeros((ROWS, 2))
    for r in range(SIZE):
        np.add.at(dense, rows_of(r), w[r])
    assert_close(np.asarray(got), (dense / SIZE).astype(np.float32),
                 "float32", name)


def tape_predivide_case() -> None:
    """gradient_predivide_factor scales dense gradients only; the sparse
    one is still averaged (no NotImplementedError from the optimizer's
    own call)."""
    name = "tape-predivide"
    wd = [rank_data(op_table.seed(name, "d"), r, (3,), "float32")
          for r in range(SIZE)]
    ws = [rank_data(op_table.seed(name, "s"), r, (3, 2), "float32")
          for r in range(SIZE)]
    dense_v = tf.Variable(tf.zeros([3]))
    table = tf.Variable(tf.zeros([ROWS, 2]))
    with tf.GradientTape() as tape:
        loss = (tf.reduce_sum(dense_v * wd[RANK]) +
                tf.reduce_sum(tf.gather(table, rows_of(RANK)) * ws[RANK]))
    tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0)
    g_dense, g_sparse = tape.gradient(loss, [dense_v, table])
    if not isinstance(g_sparse, tf.IndexedSlices):
        raise CaseFailure("sparse gradient came back as %s" % type(g_sparse))
    assert_close(g_dense.numpy(), np.mean(wd, 0).astype(np.float32),
                 "float32", name + " dense")
    dense = np.zeros((ROWS, 2))
    for r in range(SIZE):
        np.add.at(dense, rows_of(r), ws[r])
    assert_close(tf.convert_to_tensor(g_sparse).numpy(),
                 (dense / SIZE).astype(np.float32), "float32",
                 name + " sparse")


def error_cases() -> None:
    seed = op_table.seed("errors")
    x = my_slices(seed, "float32")
    dense = tf.ones([2])
    check.run("errors/prescale-allreduce", lambda: expect_raises(
        lambda: hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0),
        NotImplementedError, SCALE_MESSAGE))
    check.run("errors/postscale-allreduce", lambda: expect_raises(
        lambda: hvd.allreduce(x, op=hvd.Average, postscale_factor=0.5),
        NotImplementedError, SCALE_MESSAGE))
    check.run("errors/prescale-grouped-mixed", lambda: expect_raises(
        lambda: hvd.grouped_allreduce([dense, x], prescale_factor=2.0),
        NotImplementedError, SCALE_MESSAGE))

    def graph_creates_nothing():
        # The refusal comes before any collective op exists, so no rank
        # can be left with half a grouped call in its graph.
        with tf.Graph().as_default() as graph:
            slices = my_slices(seed, "float32")
            expect_raises(lambda: hvd.grouped_allreduce(
                [tf.ones([2]), slices], postscale_factor=3.0),
                NotImplementedError, SCALE_MESSAGE)
            made = [op.name for op in graph.get_operations()
                    if op.type.startswith("Hbcore")]
        if made:
            raise CaseFailure("ops created before the error: %s" % made)
    check.run("errors/scale-graph-creates-nothing", graph_creates_nothing)
    check.run("errors/min-allreduce", lambda: expect_raises(
        lambda: hvd.allreduce(x, op=hvd.Min), NotImplementedError,
        "Sum and Average"))
    check.run("errors/max-grouped", lambda: expect_raises(
        lambda: hvd.grouped_allreduce([dense, x], op=hvd.Max),
        NotImplementedError, "Sum and Average"))

    def average_bool():
        # True division takes no bool: refused before any op exists (the
        # dense tensor's op of the group included).
        with tf.Graph().as_default() as graph:
            flags = tf.IndexedSlices(tf.constant([[True, False]]),
                                     tf.constant([0], tf.int64),
                                     dense_shape=tf.constant([ROWS, 2],
                                                             tf.int64))
            expect_raises(lambda: hvd.grouped_allreduce(
                [tf.ones([2]), flags], op=hvd.Average), TypeError,
                "dtype bool cannot be divided")
            made = [op.name for op in graph.get_operations()
                    if op.type.startswith("Hbcore")]
        if made:
            raise CaseFailure("ops created before the error: %s" % made)
    check.run("errors/average-bool", average_bool)

    def recovered():
        out = hvd.allreduce(tf.constant([float(RANK)]), op=hvd.Sum,
                            name="sparse.after_errors")
        if float(out[0]) != sum(range(SIZE)):
            raise CaseFailure("allreduce after the errors: %s" % out)
    check.run("errors/recovered", recovered)


def main() -> None:
    hvd.init()
    for dtype in DTYPES:
        for op in OPS:
            for mode in MODES:
                check.run("allreduce/%s/%s/%s" % (dtype, op, mode),
                          lambda d=dtype, o=op, m=mode:
                          allreduce_case(d, o, m))
    for op in OPS:
        for mode in MODES:
            check.run("grouped-mixed/%s/%s" % (op, mode),
                      lambda o=op, m=mode: grouped_mixed_case(o, m))
    for mode in MODES:
        check.run("gather-gradient/%s" % mode,
                  lambda m=mode: gather_gradient_case(m))
    check.run("tape-predivide", tape_predivide_case)
    error_cases()
    hvd.shutdown()
    report({"rank": RANK, "size": SIZE,
            "keras": _compat.keras_module().__name__,
            "unlisted": sorted(set(check.results) - set(case_names())),
            "failed": [k for k, v in check.results.items() if not v["ok"]]})


if __name__ == "__main__":
    main()
