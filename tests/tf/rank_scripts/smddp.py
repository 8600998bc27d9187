"""hbcore_tf.smddp (smdistributed.dataparallel.tensorflow's API) cases,
checked against numpy on every rank's rank-seeded data. Run by
tests/tf/test_smddp.py under hbrun.
"""
import numpy as np

from train_common import (Checker, check, close, expect_raises, report,
                          run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf.smddp as sdp  # noqa: E402

CASES = ["init-twice", "topology", "allreduce/ops", "allreduce/function",
         "allreduce/fp16", "allreduce/param-index", "oob_allreduce",
         "broadcast", "broadcast_variables", "broadcast_global_variables",
         "tape", "optimizer/keras", "optimizer/v1", "unsupported-arguments",
         "overlap", "optimizer-variables-call"]


def data(rank: int) -> np.ndarray:
    return np.random.default_rng([3, rank]).normal(size=(4, 3)).astype(
        np.float32)


def main() -> None:
    sdp.init()
    rank, size = sdp.rank(), sdp.size()
    everyone = np.stack([data(r) for r in range(size)])
    checker = Checker(rank)

    def init_twice():
        expect_raises(sdp.init, RuntimeError,
                      "init() called more than once. smdistributed."
                      "dataparallel is already initialized.")

    def topology():
        check((sdp.rank(), sdp.size(), sdp.local_rank(), sdp.local_size()) ==
              (hbcore.rank(), hbcore.size(), hbcore.local_rank(),
               hbcore.local_size()), "topology differs from hbcore's")

    def allreduce_ops():
        x = tf.constant(data(rank))
        close(sdp.allreduce(x, 0, 1), everyone.mean(0), "default AVERAGE")
        close(sdp.allreduce(x, 0, 1, op=None), everyone.mean(0), "op=None")
        for op, want in ((sdp.ReduceOp.SUM, everyone.sum(0)),
                         (sdp.ReduceOp.MIN, everyone.min(0)),
                         (sdp.ReduceOp.MAX, everyone.max(0)),
                         (sdp.ReduceOp.AVERAGE, everyone.mean(0))):
            close(sdp.allreduce(x, 0, 1, op=op), want, "op %r" % op)

    def allreduce_function():
        @tf.function
        def reduce_all(tensors):
            return [sdp.allreduce(t, i, len(tensors), op=sdp.ReduceOp.SUM)
                    for i, t in enumerate(tensors)]
        got = reduce_all([tf.constant(data(rank)), tf.constant(data(rank) * 2)])
        close(got[0], everyone.sum(0), "first of two")
        close(got[1], 2 * everyone.sum(0), "second of two")

    def allreduce_fp16():
        got = sdp.allreduce(tf.constant(data(rank)), 0, 1,
                            compression=sdp.Compression.fp16)
        check(got.dtype == tf.float32, "fp16 compression changed the dtype")
        close(got, everyone.mean(0), "fp16", rtol=1e-2, atol=1e-2)

    def param_index():
        x = tf.constant(data(rank))
        expect_raises(lambda: sdp.allreduce(x, 1, 1), ValueError,
                      "param_index")
        expect_raises(lambda: sdp.allreduce(x, -1, 2), ValueError,
                      "param_index")

    def oob():
        close(sdp.oob_allreduce(tf.constant(data(rank))), everyone.mean(0),
              "oob_allreduce")
        expect_raises(lambda: sdp.oob_allreduce(
            tf.constant(data(rank)), op=sdp.ReduceOp.SUM), ValueError,
            "ReduceOp.AVERAGE")

    def broadcast():
        root = size - 1
        close(sdp.broadcast(tf.constant(data(rank)), root), data(root),
              "broadcast from the last rank")

    def broadcast_vars():
        variables = [tf.Variable(data(rank)), tf.Variable(data(rank)[0])]
        sdp.broadcast_variables(variables, root_rank=1)
        close(variables[0], data(1), "variable 0")
        close(variables[1], data(1)[0], "variable 1")

    def broadcast_globals():
        with tf.Graph().as_default():
            v = tf.compat.v1.get_variable("v", initializer=data(rank))
            op = sdp.broadcast_global_variables(1)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(op)
                close(sess.run(v), data(1), "global variable")

    def tape():
        w = tf.Variable(np.ones(3, np.float32))

        @tf.function
        def grads(x):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.linalg.matvec(x, w))
            return sdp.DistributedGradientTape(t).gradient(loss, [w])[0]

        close(grads(tf.constant(data(rank))), everyone.sum(1).mean(0),
              "tape gradient")

    def optimizer_keras():
        w = tf.Variable(np.zeros(3, np.float32))
        opt = sdp.DistributedOptimizer(tf.keras.optimizers.SGD(1.0))
        opt.apply_gradients([(tf.constant(data(rank)[0]), w)])
        close(w, -everyone[:, 0].mean(0), "Keras SGD step")

    def optimizer_v1():
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=np.zeros(
                3, np.float32))
            opt = sdp.DistributedOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(1.0))
            train = opt.minimize(tf.reduce_sum(w * data(rank)[0]))
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(train)
                close(sess.run(w), -everyone[:, 0].mean(0), "v1 step")

    def unsupported():
        opt = tf.keras.optimizers.SGD(0.1)
        for kwargs in ({"device_dense": "/cpu:0"}, {"device_sparse": "/cpu:0"},
                       {"sparse_as_dense": True}):
            expect_raises(lambda: sdp.DistributedOptimizer(opt, **kwargs),
                          NotImplementedError, list(kwargs)[0])
        expect_raises(lambda: sdp.DistributedOptimizer(
            opt, op=sdp.ReduceOp.SUM), ValueError, "ReduceOp.AVERAGE")
        with tf.GradientTape() as t:
            pass
        expect_raises(lambda: sdp.DistributedGradientTape(
            t, device_dense="/cpu:0"), NotImplementedError, "device_dense")

    def overlap():
        x = tf.constant(data(rank))
        close(sdp.overlap(x), data(rank), "overlap is the identity")

    def variables_call():
        opt = tf.keras.optimizers.Adam(0.1)
        w = tf.Variable(np.zeros(3, np.float32))
        opt.apply_gradients([(tf.ones(3), w)])
        check(list(opt.variables()) == list(opt.variables),
              "opt.variables() differs from opt.variables")

    table = dict(zip(CASES, [
        init_twice, topology, allreduce_ops, allreduce_function,
        allreduce_fp16, param_index, oob, broadcast, broadcast_vars,
        broadcast_globals, tape, optimizer_keras, optimizer_v1, unsupported,
        overlap, variables_call]))
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    sdp.shutdown()


if __name__ == "__main__":
    main()
