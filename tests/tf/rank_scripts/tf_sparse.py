"""Rank script: allreduce of tf.IndexedSlices (Horovod's semantics: an
allgather of values and indices; Average divides the values by size),
checked against numpy on every rank.

    hbrun -np N python tf_sparse.py

Cases (``case_names()``):

- allreduce/<dtype>/<op>/<mode>: one IndexedSlices, Sum and Average, float
  and integer values (integer Average truncates toward zero), eagerly, in
  a tf.function and in a tf.compat.v1 Session.run;
- grouped-mixed/<op>/<mode>: grouped_allreduce of dense tensors and
  IndexedSlices interleaved;
- gather-gradient/<mode>: the IndexedSlices gradient of tf.gather;
- tape-predivide: DistributedGradientTape(gradient_predivide_factor=2)
  with a dense and a sparse gradient;
- errors/*: pre/postscale factors and Min/Max raise NotImplementedError
  with Horovod's message before any op exists; the runtime still works.
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
                    env_rank, env_size, expect_raises, rank_data, report)
import op_table  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import hbcore_tf as hvd  # noqa: E402

MODES = ["eager", "function", "graph"]
DTYPES = ["float32", "float64", "int32", "int64"]
OPS = ["Sum", "Average"]
ROWS = 6  # dense_shape[0] of every IndexedSlices here
OTHER_CASES = ["tape-predivide", "errors/prescale-allreduce",
               "errors/postscale-allreduce", "errors/prescale-grouped-mixed",
               "errors/scale-graph-creates-nothing", "errors/min-allreduce",
               "errors/max-grouped", "errors/recovered"]


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
    """The indices of rank r's slices (a duplicate on purpose)."""
    return [r % ROWS, (r + 2) % ROWS, r % ROWS]


def slices_data(seed: int, r: int, dtype: str) -> np.ndarray:
    return rank_data(seed, r, (3, 2), dtype)


def average_np(values: np.ndarray, dtype: str) -> np.ndarray:
    """numpy's per-value Average: true division for floats, integer
    division truncating toward zero for integers."""
    if dtype.startswith("float"):
        return (values.astype(np.float64) / SIZE).astype(dtype)
    return (np.sign(values) * (np.abs(values) // SIZE)).astype(dtype)


def expected_slices(seed: int, dtype: str, op: str
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, indices, dense) of the reduced IndexedSlices: every rank's
    slices in rank order, values averaged per value for Average."""
    values = np.concatenate([slices_data(seed, r, dtype)
                             for r in range(SIZE)])
    if op == "Average":
        values = average_np(values, dtype)
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
    assert_close(np.asarray(got[0]), values, dtype, what + " values")
    assert_close(np.asarray(got[1]), indices, "int64", what + " indices")
    assert_close(np.asarray(got[2]), dense, dtype, what + " dense")


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


def grouped_mixed_case(op: str, mode: str) -> None:
    name = "grouped-mixed/%s/%s" % (op, mode)
    seeds = [op_table.seed(name, i) for i in range(4)]
    dense_specs = [(seeds[0], (4,), "float32"), (seeds[2], (3,), "float64")]
    dense_in = [rank_data(seed, RANK, shape, dt)
                for seed, shape, dt in dense_specs]

    def build():
        outs = hvd.grouped_allreduce(
            [tf.constant(dense_in[0]), my_slices(seeds[1], "float32"),
             tf.constant(dense_in[1]), my_slices(seeds[3], "int32")],
            op=getattr(hvd, op))
        kinds = [isinstance(o, tf.IndexedSlices) for o in outs]
        if kinds != [False, True, False, True]:
            raise CaseFailure("output kinds %s" % kinds)
        return [t for o in outs for t in flatten(o)]
    got = in_mode(mode, build)
    for i, (seed, shape, dt) in enumerate(dense_specs):
        stack = np.stack([rank_data(seed, r, shape, dt)
                          for r in range(SIZE)]).astype(np.float64)
        exp = stack.sum(0) / (SIZE if op == "Average" else 1)
        assert_close(np.asarray(got[4 * i]), exp.astype(dt), dt,
                     "%s dense %d" % (name, i))
    check_slices(got[1:4], seeds[1], "float32", op, name + " sparse 0")
    check_slices(got[5:8], seeds[3], "int32", op, name + " sparse 1")


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
            "unlisted": sorted(set(check.results) - set(case_names())),
            "failed": [k for k, v in check.results.items() if not v["ok"]]})


if __name__ == "__main__":
    main()
