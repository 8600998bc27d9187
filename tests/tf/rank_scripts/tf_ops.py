"""Rank script: the hbcore_tf API checked against numpy on every rank.

    hbrun -np N python tf_ops.py

Runs, in this order (every rank submits the same collectives in the same
order, so a failing case does not desynchronise the next ones):

- before-init/*   every API call raises ValueError before hvd.init()
- <mode>/<kind>/* the op table (op_table.py) eagerly, in one tf.function
                  and in one tf.compat.v1 Session.run
- fusion/*        grouped_allreduce of 50 tensors; 50 allreduces in one
                  tf.function (not serialised by auto control deps)
- fastpath/*      a small allreduce repeated 10 times under one name,
                  eager and in a tf.function (the fast path carries it)
- graph/*         v1 gradients, broadcast_global_variables,
                  BroadcastGlobalVariablesHook + MonitoredTrainingSession
- errors/*        mismatch, invalid root, bad splits, Adasum, ...
- misc/*          topology ops, objects, variables, compression, join
- buffers/*       in-place outputs, recycled output buffers, unnamed eager
                  names reused with new shapes
- shutdown/*      a pending op fails with UnknownError when a peer shuts down

Each rank reports the core names its tf.function and v1 graph produced
(pytest checks they agree across ranks); rank 0 also reports fusion facts
read from the timeline ($HB_TEST_OUT/timeline.json).
"""
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "rank_scripts"))
from common import (OUT_DIR, CaseFailure, Checker, all_rank_data,  # noqa: E402
                    assert_close, await_peers, env_rank, env_size,
                    expect_raises, rank_data, reducescatter_rows, report,
                    signal_peers)
import op_table  # noqa: E402

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import hbcore_tf as hvd  # noqa: E402

RANK, SIZE = env_rank(), env_size()
check = Checker(RANK)
facts: Dict[str, Any] = {"rank": RANK, "size": SIZE}


def run(name: str, fn: Callable[[], Any]) -> None:
    check.run(name, fn)


def np_of(t: Any) -> np.ndarray:
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def core_names(graph: Any) -> List[str]:
    """The tensor names the collective ops of ``graph`` send to the core."""
    names = []
    for op in graph.get_operations():
        if op.type in ("HbcoreCollective", "HbcoreAlltoall", "HbcoreBarrier",
                       "HbcoreJoin"):
            const = op.inputs[-1].op
            if const.type == "Const":
                value = tf.make_ndarray(const.get_attr("value"))
                names.extend(v.decode() for v in np.asarray(value).reshape(-1))
    return sorted(names)


# ----------------------------------------------------------------- before init

def before_init() -> None:
    x = tf.constant([1.0, 2.0])
    calls = {
        "allreduce": lambda: hvd.allreduce(x),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x]),
        "allgather": lambda: hvd.allgather(x),
        "grouped_allgather": lambda: hvd.grouped_allgather([x]),
        "broadcast": lambda: hvd.broadcast(x, 0),
        "alltoall": lambda: hvd.alltoall(x),
        "reducescatter": lambda: hvd.reducescatter(x),
        "join": hvd.join,
        "barrier": hvd.barrier,
        "broadcast_object": lambda: hvd.broadcast_object(1),
        "rank": hvd.rank,
        "size": hvd.size,
    }
    for label, fn in calls.items():
        run("before-init/" + label,
            lambda fn=fn: expect_raises(fn, ValueError, "not been initialized",
                                        "init()"))

    run("before-init/size_op", lambda: expect_raises(
        lambda: hvd.size_op(), tf.errors.FailedPreconditionError, "init"))
    run("before-init/is_initialized",
        lambda: _assert(hvd.is_initialized() is False, "is_initialized"))


def _assert(cond: bool, what: str) -> None:
    if not cond:
        raise CaseFailure(what)


# ------------------------------------------------------------------- op table

def compare(spec: op_table.Spec, outputs: List[Any]) -> None:
    if len(outputs) != len(spec.expected):
        raise CaseFailure("%d outputs, expected %d" % (len(outputs),
                                                       len(spec.expected)))
    for i, (out, exp) in enumerate(zip(outputs, spec.expected)):
        # alltoall's second output: the received splits, int32 (Horovod's).
        dt = ("int32" if spec.key.startswith("alltoall/") and i == 1
              else spec.dtype)
        assert_close(np_of(out), exp, dt, "%s output %d" % (spec.key, i))


def table_eager(specs: List[op_table.Spec]) -> None:
    for spec in specs:
        def fn(spec=spec):
            compare(spec, spec.call(hvd, [tf.constant(x) for x in spec.inputs]))
        run("eager/" + spec.key, fn)


def _results_checker(mode: str, specs: List[op_table.Spec],
                     produce: Callable[[], List[List[Any]]]) -> None:
    """Runs ``produce`` once (all specs at once) inside the first case; each
    spec is then its own case (all fail together if ``produce`` failed)."""
    state: Dict[str, Any] = {}

    def results() -> List[List[Any]]:
        if "error" in state:
            raise CaseFailure("the batched run failed: %s" % state["error"])
        return state["results"]

    start = time.monotonic()
    try:
        state["results"] = produce()
    except Exception as exc:  # noqa: BLE001 - reported by every case
        state["error"] = "%s: %s" % (type(exc).__name__, exc)
    facts["%s_table_seconds" % mode] = round(time.monotonic() - start, 2)
    for i, spec in enumerate(specs):
        run("%s/%s" % (mode, spec.key),
            lambda i=i, spec=spec: compare(spec, results()[i]))


def table_function(specs: List[op_table.Spec]) -> None:
    inputs = [[tf.constant(x) for x in spec.inputs] for spec in specs]

    # autograph=False: converting the table's lambdas would quadruple the
    # trace time and adds nothing (no Python control flow on tensors).
    @tf.function(autograph=False)
    def all_ops(inputs):
        return [spec.call(hvd, xs) for spec, xs in zip(specs, inputs)]

    def produce():
        concrete = all_ops.get_concrete_function(inputs)
        facts["function_names"] = core_names(concrete.graph)
        return all_ops(inputs)
    _results_checker("function", specs, produce)


def table_graph(specs: List[op_table.Spec]) -> None:
    def produce():
        with tf.Graph().as_default() as graph:
            with tf.name_scope("table"):
                outs = [spec.call(hvd, [tf.constant(x) for x in spec.inputs])
                        for spec in specs]
            facts["graph_names"] = core_names(graph)
            with tf.compat.v1.Session() as sess:
                first = sess.run(outs)
                second = sess.run(outs)  # the same names again: cache path
        for a, b in zip(first, second):
            for x, y in zip(a, b):
                if not np.array_equal(np.asarray(x), np.asarray(y)):
                    raise CaseFailure("second Session.run differs")
        return first
    _results_checker("graph", specs, produce)


# ---------------------------------------------------------------- upstream

def w_of(key: str, r: int, shape) -> np.ndarray:
    """Rank r's upstream-gradient weights: loss_r = sum(y * w_r)."""
    return rank_data(op_table.seed(key, "w"), r, shape, "float32")


# --------------------------------------------------------------------- fusion

def fusion_cases() -> None:
    n = 50

    def grouped50():
        inputs = [all_rank_data(op_table.seed("g50", i), SIZE, (i % 7 + 1,),
                                "float32") for i in range(n)]
        outs = hvd.grouped_allreduce([tf.constant(x[RANK]) for x in inputs],
                                     op=hvd.Sum, name="g50")
        for x, out in zip(inputs, outs):
            assert_close(np_of(out), np.sum(x, axis=0).astype(np.float32),
                         "float32", "g50")
    run("fusion/grouped50", grouped50)

    def function50():
        inputs = [all_rank_data(op_table.seed("f50", i), SIZE, (i % 5 + 2,),
                                "float32") for i in range(n)]

        @tf.function
        def fused50(xs):
            return [hvd.allreduce(x, op=hvd.Sum, name="f50_%d" % i)
                    for i, x in enumerate(xs)]
        xs = [tf.constant(x[RANK]) for x in inputs]
        graph = fused50.get_concrete_function(xs).graph
        chained = [op.name for op in graph.get_operations()
                   if op.type == "HbcoreCollective" and any(
                       c.type == "HbcoreCollective" for c in op.control_inputs)]
        if chained:
            raise CaseFailure("collectives serialised by control deps: %s"
                              % chained[:5])
        for _ in range(3):  # three steps: the later ones hit the cache
            outs = fused50(xs)
        for x, out in zip(inputs, outs):
            assert_close(np_of(out), np.sum(x, axis=0).astype(np.float32),
                         "float32", "f50")
    run("fusion/function50", function50)

    # The fast path (HB_FAST_PATH_THRESHOLD, on by default): a small Sum or
    # Average allreduce repeated under one name is cached after its first
    # use and then rides the negotiation's collective; the values must be
    # the same, and rank 0's timeline shows FAST_PATH_ALLREDUCE events for
    # it (timeline_facts, "fastpath"). Eager and in a tf.function.
    steps = 10

    def fast_eager():
        for step in range(steps):
            x = all_rank_data(op_table.seed("fpe", step), SIZE, (3,),
                              "float32")
            out = hvd.allreduce(tf.constant(x[RANK]), op=hvd.Average,
                                name="fpe_small")
            assert_close(np_of(out), np.mean(x, axis=0).astype(np.float32),
                         "float32", "fpe step %d" % step)
    run("fastpath/eager", fast_eager)

    def fast_function():
        @tf.function
        def step_fn(x):
            return hvd.allreduce(x, op=hvd.Sum, name="fpf_small")
        for step in range(steps):
            x = all_rank_data(op_table.seed("fpf", step), SIZE, (2, 2),
                              "float64")
            out = step_fn(tf.constant(x[RANK]))
            assert_close(np_of(out), np.sum(x, axis=0), "float64",
                         "fpf step %d" % step)
    run("fastpath/function", fast_function)


def timeline_facts(path: str) -> Dict[str, Any]:
    """Per group of tensors, how many distinct ALLREDUCE start times (one
    per fused batch) the timeline shows."""
    with open(path) as f:
        text = f.read().strip()
    text = text.rstrip(",")
    if not text.endswith("]"):
        text += "]"
    events = json.loads(text)
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    out: Dict[str, Any] = {}
    for label, marker in (("grouped50", "g50."), ("function50", ":f50_")):
        pids = {pid for pid, name in names.items() if marker in name}
        starts = sorted({e["ts"] for e in events if e.get("ph") == "X"
                         and e["pid"] in pids and e["name"] == "ALLREDUCE"})
        fused = {e["ts"] for e in events if e.get("ph") == "X" and
                 e["pid"] in pids and e["name"] == "MEMCPY_IN_FUSION_BUFFER"}
        out[label] = {"tensors": len(pids), "allreduce_batches": len(starts),
                      "fused_batches": len(fused)}
    out["fastpath"] = {}
    for label, marker in (("eager", "fpe_small"), ("function", "fpf_small")):
        pids = {pid for pid, name in names.items() if marker in name}
        out["fastpath"][label] = sum(
            1 for e in events if e.get("ph") == "X" and e["pid"] in pids
            and e["name"] == "FAST_PATH_ALLREDUCE")
    return out


# ----------------------------------------------------------------- v1 graphs

def graph_cases() -> None:
    def v1_gradients_equal_rows():
        key = "graph/gradients"
        x_np = rank_data(op_table.seed(key), RANK, (2, 2), "float32")
        ws = [w_of(key, r, (2 * SIZE, 2)) for r in range(SIZE)]
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [2, 2])
            y = hvd.allgather(hvd.allreduce(x, op=hvd.Sum))
            loss = tf.reduce_sum(y * ws[RANK])
            (g,) = tf.compat.v1.gradients(loss, [x])
            with tf.compat.v1.Session() as sess:
                got = sess.run(g, {x: x_np})
        # d/dx_r: allgather grad gives mean_s(w_s)[rows of r] on rank r;
        # the allreduce(Sum) grad then sums these slices over ranks.
        mean_w = np.mean(ws, axis=0)
        expected = sum(mean_w[2 * r:2 * r + 2] for r in range(SIZE))
        assert_close(got, expected.astype(np.float32), "float32", key)
    run("graph/gradients", v1_gradients_equal_rows)

    root = SIZE - 1

    def global_variables():
        inits = all_rank_data(op_table.seed("bgv"), SIZE, (3, 2), "float32")
        with tf.Graph().as_default():
            a = tf.compat.v1.get_variable("a", initializer=inits[RANK])
            b = tf.compat.v1.get_variable(
                "b", initializer=tf.constant([RANK, RANK * 2], tf.int64))
            bcast = hvd.broadcast_global_variables(root)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(bcast)
                got_a, got_b = sess.run([a, b])
        assert_close(got_a, inits[root], "float32", "a")
        assert_close(got_b, np.array([root, root * 2], np.int64), "int64", "b")
    run("graph/broadcast_global_variables", global_variables)

    def hook():
        inits = all_rank_data(op_table.seed("hook"), SIZE, (4,), "float64")
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=inits[RANK])
            step = tf.compat.v1.train.get_or_create_global_step()
            loss = tf.reduce_sum(w * w)
            opt = tf.compat.v1.train.GradientDescentOptimizer(0.25)
            grads_and_vars = opt.compute_gradients(loss, [w])
            reduced = [(hvd.allreduce(g), v) for g, v in grads_and_vars]
            train = opt.apply_gradients(reduced, global_step=step)
            hooks = [hvd.BroadcastGlobalVariablesHook(root)]
            values = []
            with tf.compat.v1.train.MonitoredTrainingSession(
                    hooks=hooks, checkpoint_dir=None,
                    save_summaries_steps=None, save_summaries_secs=None,
                    log_step_count_steps=None) as sess:
                values.append(sess.run(w))
                for _ in range(3):
                    sess.run(train)
                values.append(sess.run(w))
        assert_close(values[0], inits[root], "float64", "after broadcast")
        expected = inits[root] * (1 - 0.25 * 2) ** 3  # d(w.w)/dw = 2w
        assert_close(values[1], expected, "float64", "after 3 steps")
    run("graph/hook-monitored-session", hook)

    def barrier_and_join_ops():
        with tf.Graph().as_default():
            b = hvd.barrier()
            _assert(isinstance(b, tf.Operation), "barrier is an op in graphs")
            with tf.compat.v1.Session() as sess:
                sess.run(b)
                sess.run(b)
    run("graph/barrier", barrier_and_join_ops)


# --------------------------------------------------------------------- errors

def error_cases() -> None:
    Fp = tf.errors.FailedPreconditionError
    Inv = tf.errors.InvalidArgumentError

    run("errors/mismatch-shape", lambda: expect_raises(
        lambda: hvd.allreduce(tf.zeros([RANK + 1]), name="e.shape"), Fp,
        "e.shape"))
    run("errors/mismatch-dtype", lambda: expect_raises(
        lambda: hvd.allreduce(tf.zeros([3], tf.float32 if RANK == 0 else
                                       tf.float64), name="e.dtype"), Fp))
    run("errors/mismatch-op", lambda: expect_raises(
        lambda: hvd.allreduce(tf.zeros([3]), op=hvd.Sum if RANK == 0 else
                              hvd.Max, name="e.op"), Fp))
    run("errors/mismatch-root", lambda: expect_raises(
        lambda: hvd.broadcast(tf.zeros([3]), RANK, name="e.root"), Fp))

    def mismatch_function():
        @tf.function
        def f(x):
            return hvd.allgather(x)
        expect_raises(lambda: f(tf.zeros([2, RANK + 1])), Fp)
    run("errors/mismatch-function", mismatch_function)

    def mismatch_graph():
        with tf.Graph().as_default():
            y = hvd.allreduce(tf.zeros([RANK + 2]))
            with tf.compat.v1.Session() as sess:
                expect_raises(lambda: sess.run(y), Fp)
    run("errors/mismatch-graph", mismatch_graph)

    run("errors/invalid-root-high", lambda: expect_raises(
        lambda: hvd.broadcast(tf.zeros([3]), SIZE), Inv, "root"))
    run("errors/invalid-root-negative", lambda: expect_raises(
        lambda: hvd.broadcast(tf.zeros([3]), -1), Inv, "root"))
    run("errors/alltoall-splits-sum", lambda: expect_raises(
        lambda: hvd.alltoall(tf.zeros([5]), splits=[1] * SIZE), Inv))
    run("errors/alltoall-splits-length", lambda: expect_raises(
        lambda: hvd.alltoall(tf.zeros([5]), splits=[5]), Inv))
    run("errors/alltoall-uneven", lambda: expect_raises(
        lambda: hvd.alltoall(tf.zeros([SIZE + 1])), Inv))
    run("errors/allgather-scalar", lambda: expect_raises(
        lambda: hvd.allgather(tf.constant(1.0)), Inv))
    run("errors/bool-average", lambda: expect_raises(
        lambda: hvd.allreduce(tf.constant([True, False])), Inv, "average"))
    for label, fn in (
            ("allreduce", lambda: hvd.allreduce(tf.zeros([2]), op=hvd.Adasum)),
            ("grouped_allreduce", lambda: hvd.grouped_allreduce(
                [tf.zeros([2])], op=hvd.Adasum)),
            ("reducescatter", lambda: hvd.reducescatter(tf.zeros([2]),
                                                        op=hvd.Adasum))):
        run("errors/adasum-" + label,
            lambda fn=fn: expect_raises(fn, NotImplementedError, "Adasum"))
    run("errors/average-and-op", lambda: expect_raises(
        lambda: hvd.allreduce(tf.zeros([2]), average=True, op=hvd.Sum),
        ValueError, "supersedes"))
    run("errors/process-set", lambda: expect_raises(
        lambda: hvd.allreduce(tf.zeros([2]), process_set=hvd.ProcessSet([0])),
        ValueError, "not registered"))
    run("errors/broadcast_global_variables-eager", lambda: expect_raises(
        lambda: hvd.broadcast_global_variables(0), RuntimeError, "eager"))

    def still_works():
        x = rank_data(3, RANK, (4,), "float32")
        out = hvd.allreduce(tf.constant(x), op=hvd.Sum, name="e.after")
        assert_close(np_of(out), np.sum(all_rank_data(3, SIZE, (4,),
                                                      "float32"), 0),
                     "float32", "after errors")
    run("errors/recovered", still_works)


# ----------------------------------------------------------------------- misc

def misc_cases() -> None:
    def topology():
        _assert(int(hvd.size_op()) == hvd.size() == SIZE, "size_op")
        _assert(int(hvd.rank_op()) == hvd.rank() == RANK, "rank_op")
        _assert(int(hvd.local_rank_op()) == hvd.local_rank(), "local_rank_op")
        _assert(int(hvd.local_size_op()) == hvd.local_size(), "local_size_op")
        _assert(hvd.cross_size() * hvd.local_size() == SIZE, "cross_size")
        _assert(0 <= hvd.cross_rank() < hvd.cross_size(), "cross_rank")
        _assert(hvd.mpi_built() and hvd.mpi_enabled(), "mpi")
        _assert(not hvd.gloo_built() and not hvd.gloo_enabled(), "gloo")
        _assert(isinstance(hvd.nccl_built(), bool), "nccl_built")
        _assert(isinstance(hvd.mpi_threads_supported(), bool), "threads")
        _assert(hvd.is_initialized(), "is_initialized")

        @tf.function
        def ops():
            return hvd.size_op(), hvd.rank_op()
        s, r = ops()
        _assert(int(s) == SIZE and int(r) == RANK, "topology in tf.function")
        with tf.Graph().as_default():
            ops_ = [hvd.size_op(), hvd.rank_op(), hvd.local_size_op()]
            with tf.compat.v1.Session() as sess:
                got = sess.run(ops_)
        _assert(list(got) == [SIZE, RANK, hvd.local_size()], "graph topology")
    run("misc/topology", topology)

    def aliases():
        _assert(hvd.oob_allreduce is hvd.allreduce, "oob_allreduce")
        _assert(hvd.ReduceOp.SUM == hvd.Sum and hvd.Average == 0, "ReduceOp")
        _assert(hvd.global_process_set.size() == SIZE, "global_process_set")
    run("misc/aliases", aliases)

    def objects():
        root = SIZE - 1
        obj = {"rank": RANK, "data": np.arange(RANK + 1)}
        got = hvd.broadcast_object(obj, root_rank=root)
        _assert(got["rank"] == root and len(got["data"]) == root + 1,
                "broadcast_object")
        everyone = hvd.allgather_object(("r", RANK))
        _assert(everyone == [("r", r) for r in range(SIZE)],
                "allgather_object %r" % (everyone,))
        fn = hvd.broadcast_object_fn(root_rank=0)
        _assert(fn(RANK * 7) == 0, "broadcast_object_fn")
    run("misc/objects", objects)

    def variables():
        root = SIZE - 1
        inits = all_rank_data(op_table.seed("vars"), SIZE, (3, 2), "float32")
        a = tf.Variable(inits[RANK])
        b = tf.Variable(tf.constant([RANK, 5], tf.int64))
        c = tf.Variable(tf.constant(RANK == 0))
        _assert(hvd.broadcast_variables([a, b, c], root) is None, "eager None")
        assert_close(np_of(a), inits[root], "float32", "a")
        assert_close(np_of(b), np.array([root, 5], np.int64), "int64", "b")
        assert_close(np_of(c), np.array(root == 0), "bool", "c")
        a.assign(inits[RANK])
        back = hvd.broadcast_([a], 0)
        _assert(back[0] is a, "broadcast_ returns the variables")
        assert_close(np_of(a), inits[0], "float32", "broadcast_")

        @tf.function
        def in_function():
            hvd.broadcast_variables([a], root)
        a.assign(inits[RANK])
        in_function()
        assert_close(np_of(a), inits[root], "float32", "in tf.function")
    run("misc/broadcast_variables", variables)

    def compression():
        x = all_rank_data(op_table.seed("fp16"), SIZE, (5,), "float32")
        out = hvd.allreduce(tf.constant(x[RANK]), op=hvd.Sum,
                            compression=hvd.Compression.fp16)
        _assert(out.dtype == tf.float32, "fp16 decompresses to float32")
        exp = np.sum([v.astype(np.float16) for v in x], axis=0, dtype=np.float32)
        if not np.allclose(np_of(out), exp, rtol=1e-2, atol=2e-2):
            raise CaseFailure("fp16 allreduce %s vs %s" % (np_of(out), exp))
        i = hvd.allreduce(tf.constant([RANK, 1]), op=hvd.Sum,
                          compression=hvd.Compression.fp16)
        _assert(i.dtype == tf.int32 and
                list(np_of(i)) == [sum(range(SIZE)), SIZE], "ints untouched")
        c, ctx = hvd.Compression.fp16.compress(tf.constant([1.0], tf.float64))
        _assert(c.dtype == tf.float16, "compress casts to float16")
        _assert(hvd.Compression.fp16.decompress(c, ctx).dtype == tf.float64,
                "decompress restores")
        n, ctx = hvd.Compression.none.compress(tf.constant([1.0]))
        _assert(n.dtype == tf.float32, "none compressor")
    run("misc/compression", compression)

    def reducescatter_fp16():
        x = all_rank_data(op_table.seed("rsfp16"), SIZE, (SIZE * 2,), "float32")
        out = hvd.reducescatter(tf.constant(x[RANK]), op=hvd.Sum,
                                compression=hvd.Compression.fp16)
        start, count = reducescatter_rows(SIZE * 2, SIZE, RANK)
        exp = np.sum(x, axis=0)[start:start + count]
        _assert(out.dtype == tf.float32 and
                np.allclose(np_of(out), exp, rtol=1e-2, atol=2e-2),
                "reducescatter fp16")
    run("misc/reducescatter-compression", reducescatter_fp16)

    def names_in_graph():
        from hbcore_tf._ops import naming as _naming
        with tf.Graph().as_default():
            with tf.name_scope("outer"):
                with _naming.op_scope("K", None) as a:
                    pass
                with _naming.op_scope("K", "given") as b:
                    pass
                with _naming.op_scope("K", "given", True) as c:
                    pass
        _assert((a, b, c) == ("outer/K", "outer/given", "given_1"),
                "graph names %r" % ((a, b, c),))
        seen = {}

        @tf.function
        def my_step(x):
            with _naming.op_scope("K", "n") as n1:
                pass
            seen["top"] = n1
            return tf.cond(x > 0, lambda: branch(x), lambda: x)

        def branch(x):
            with _naming.op_scope("K", "n") as n2:
                pass
            seen["cond"] = n2
            return x
        my_step(tf.constant(1.0))
        _assert(seen["top"] == "my_step:n", "function name %r" % seen)
        # The branch graph keeps the scope the cond was created in ("cond/").
        _assert(seen["cond"] == "my_step/cond_true:cond/n",
                "cond name %r" % seen)
    run("misc/naming", names_in_graph)

    def join_uneven():
        # rank r runs r + 1 steps; joined ranks contribute zeros.
        steps = RANK + 1
        inputs = {k: all_rank_data(op_table.seed("join", k), SIZE, (3,),
                                   "float32") for k in range(SIZE)}
        for k in range(steps):
            out = hvd.allreduce(tf.constant(inputs[k][RANK]), op=hvd.Sum,
                                name="join.step%d" % k)
            exp = np.sum([inputs[k][r] for r in range(SIZE) if r + 1 > k],
                         axis=0)
            assert_close(np_of(out), exp.astype(np.float32), "float32",
                         "step %d" % k)
        last = hvd.join()
        _assert(int(last) == SIZE - 1, "last joined %s" % int(last))
        hvd.barrier()
        after = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="join.after")
        _assert(float(after[0]) == SIZE, "allreduce after join")
    run("misc/join-uneven", join_uneven)


# ------------------------------------------------------------------- shutdown

def buffer_cases() -> None:
    """Outputs of allreduce and broadcast: the input's buffer when the op
    may take it over, recycled buffers (>= 64 KiB) otherwise. A recycled
    buffer must never be handed out while a tensor still uses it, and an
    input that something else still reads must never be overwritten."""
    big = (70000,)  # 280 KB of float32: above the pool's threshold
    inputs = all_rank_data(op_table.seed("buffers"), SIZE, big, "float32")
    total = np.sum(inputs, axis=0)
    var = tf.Variable(inputs[RANK])

    def kept_outputs():
        @tf.function
        def reduce_read():
            return hvd.allreduce(var.read_value(), op=hvd.Sum,
                                 name="buffers.kept")
        first = reduce_read()
        var.assign(inputs[RANK] * 2)
        second = reduce_read()
        third = reduce_read()
        var.assign(inputs[RANK])
        assert_close(np_of(first), total, "float32", "first output kept")
        assert_close(np_of(second), total * 2, "float32", "second output")
        assert_close(np_of(third), total * 2, "float32", "third output")
        assert_close(np_of(var), inputs[RANK], "float32", "input unchanged")
    run("buffers/outputs-kept-while-used", kept_outputs)

    def in_place():
        @tf.function
        def reduce_fresh(x):
            fresh = x * 2.0  # only the collective reads it: taken over
            return (hvd.allreduce(fresh, op=hvd.Sum, name="buffers.fresh"),
                    hvd.broadcast(fresh + 1.0, SIZE - 1,
                                  name="buffers.fresh_bcast"))
        x = tf.constant(inputs[RANK])
        for _ in range(3):
            reduced, bcast = reduce_fresh(x)
            assert_close(np_of(reduced), total * 2, "float32", "in place")
            assert_close(np_of(bcast), inputs[SIZE - 1] * 2 + 1, "float32",
                         "broadcast in place")
        assert_close(np_of(x), inputs[RANK], "float32", "argument unchanged")
    run("buffers/in-place", in_place)

    def eager_inputs_kept():
        x = tf.constant(inputs[RANK])
        outs = [hvd.allreduce(x, op=hvd.Sum) for _ in range(3)]
        b = hvd.broadcast(x, 0)
        assert_close(np_of(x), inputs[RANK], "float32", "eager input kept")
        for out in outs:
            assert_close(np_of(out), total, "float32", "eager output")
        assert_close(np_of(b), inputs[0], "float32", "eager broadcast")
    run("buffers/eager-inputs-kept", eager_inputs_kept)

    def unnamed_eager_shapes():
        # Unnamed eager calls made one after another share one core name;
        # a new shape under that name must renegotiate, not reuse.
        for n in (3, 5, 3, 70000, 1):
            x = all_rank_data(op_table.seed("unnamed%d" % n), SIZE, (n,),
                              "float64")
            got = hvd.allreduce(tf.constant(x[RANK]), op=hvd.Sum)
            assert_close(np_of(got), np.sum(x, axis=0), "float64",
                         "unnamed eager allreduce of %d" % n)
            got = hvd.grouped_allreduce([tf.constant(x[RANK])] * 2,
                                        op=hvd.Max)
            for g in got:
                assert_close(np_of(g), np.max(x, axis=0), "float64",
                             "unnamed eager grouped of %d" % n)
    run("buffers/unnamed-eager-shapes", unnamed_eager_shapes)


def shutdown_cases() -> None:
    def shut_down():
        # Rank 0 submits a tensor nobody else does; the others shut down
        # once it is about to (a marker-file handshake, no sleep). Whether
        # the shutdown reaches rank 0 before or after its submission, the
        # op fails with UnknownError (Horovod's type; not AbortedError,
        # which TF's MonitoredSession would retry for ever) saying where.
        if RANK == 0:
            signal_peers("never-matched")
            exc = expect_raises(lambda: hvd.allreduce(
                tf.zeros([2]), name="never.matched"), tf.errors.UnknownError)
            _assert("rank" in str(exc).lower(), "message says where: %s" % exc)
        else:
            await_peers(["never-matched"])
            hvd.shutdown()
    run("shutdown/pending-op-fails", shut_down)
    hvd.shutdown()

    def after():
        expect_raises(lambda: hvd.allreduce(tf.zeros([2])), ValueError,
                      "init()")
        _assert(not hvd.is_initialized(), "is_initialized after shutdown")
    run("shutdown/after", after)


def main() -> None:
    before_init()
    # Rank 0 writes the timeline (read at the end); set programmatically.
    timeline = os.path.join(OUT_DIR, "timeline.json") if OUT_DIR else ""
    hvd.init(config={"timeline": timeline})
    specs = op_table.build_specs(SIZE, RANK)
    facts["specs"] = len(specs)
    start = time.monotonic()
    table_eager(specs)
    facts["eager_table_seconds"] = round(time.monotonic() - start, 2)
    table_function(specs)
    table_graph(specs)
    fusion_cases()
    graph_cases()
    error_cases()
    misc_cases()
    buffer_cases()
    shutdown_cases()
    if RANK == 0 and OUT_DIR:
        try:
            facts["timeline"] = timeline_facts(timeline)
        except Exception as exc:  # noqa: BLE001 - reported to pytest
            facts["timeline_error"] = "%s: %s" % (type(exc).__name__, exc)
    facts["cases"] = len(check.results)
    facts["failed"] = [k for k, v in check.results.items() if not v["ok"]]
    report(facts)


if __name__ == "__main__":
    main()
