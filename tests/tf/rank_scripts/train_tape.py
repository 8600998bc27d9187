"""DistributedGradientTape / PartialDistributedGradientTape cases.

The loss is sum(w_i * x_i) with rank-seeded x_i, so each rank's gradient
is its own x_i and the expected reduced gradient is numpy's mean over the
ranks' x_i. Run by tests/tf/test_tape.py under hbrun.
"""
import warnings

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,
                          mean_over_ranks, rank_values, report, tf)

import keras  # noqa: E402

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.compression import Compression  # noqa: E402

SHAPES = [(3, 4), (4,), (2, 3)]
CASES = [
    "class", "eager", "tf_function", "wrap_inside_with", "persistent",
    "nested_sources", "unconnected_none", "op_sum", "fp16", "groups",
    "sparse", "sparse_as_dense", "partial_local_layer",
    "partial_unscaled", "register_local_source", "errors",
    "groups_arguments",
]


def xs(seed, rank):
    return [rank_values(seed + i, rank, s) for i, s in enumerate(SHAPES)]


def weights():
    return [tf.Variable(np.ones(s, np.float32)) for s in SHAPES]


def expected(seed, size, scale=1.0):
    return [mean_over_ranks(lambda r, i=i: xs(seed, r)[i], size) * scale
            for i in range(len(SHAPES))]


def loss_of(ws, x):
    return tf.add_n([tf.reduce_sum(w * tf.constant(v)) for w, v in zip(ws, x)])


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def grads_with(seed, fn=None, **kwargs):
        ws = weights()
        x = xs(seed, rank)

        def compute():
            with tf.GradientTape() as tape:
                loss = loss_of(ws, x)
            tape = hvd.DistributedGradientTape(tape, **kwargs)
            return tape.gradient(loss, ws)

        return (tf.function(compute) if fn == "tf.function" else compute)()

    def check_mean(grads, seed, scale=1.0, **tol):
        for g, e in zip(grads, expected(seed, size, scale)):
            close(g, e, "gradient", **tol)

    def class_():
        with tf.GradientTape() as tape:
            pass
        wrapped = hvd.DistributedGradientTape(tape)
        check(type(wrapped).__name__ == "GradientTape",
              "class name %s" % type(wrapped).__name__)
        check(isinstance(wrapped, tf.GradientTape), "not a GradientTape")

    def wrap_inside_with():
        ws = weights()
        with tf.GradientTape() as tape:
            loss = loss_of(ws, xs(30, rank))
            tape = hvd.DistributedGradientTape(tape)
        check_mean(tape.gradient(loss, ws), 30)

    def persistent():
        ws = weights()
        with tf.GradientTape(persistent=True) as tape:
            loss = loss_of(ws, xs(40, rank))
            loss2 = 2.0 * loss
        tape = hvd.DistributedGradientTape(tape)
        check_mean(tape.gradient(loss, ws), 40)
        check_mean(tape.gradient(loss2, ws), 40, scale=2.0)

    def nested_sources():
        ws = weights()
        with tf.GradientTape() as tape:
            loss = loss_of(ws, xs(50, rank))
        tape = hvd.DistributedGradientTape(tape)
        out = tape.gradient(loss, {"a": ws[0], "rest": [ws[1], ws[2]]})
        exp = expected(50, size)
        close(out["a"], exp[0], "a")
        close(out["rest"][0], exp[1], "rest[0]")
        close(out["rest"][1], exp[2], "rest[1]")

    def unconnected_none():
        ws = weights()
        unused = tf.Variable(1.0)
        with tf.GradientTape() as tape:
            loss = loss_of(ws, xs(60, rank))
        tape = hvd.DistributedGradientTape(tape)
        out = tape.gradient(loss, ws + [unused])
        check(out[-1] is None, "unconnected gradient is %r" % (out[-1],))
        check_mean(out[:-1], 60)

    def sparse(as_dense):
        table = tf.Variable(np.ones((6, 3), np.float32))

        def rows(r):
            return np.array([r % 6, (r + 1) % 6, 5], np.int64)

        with tf.GradientTape() as tape:
            picked = tf.gather(table, rows(rank))
            loss = tf.reduce_sum(picked * rank_values(70, rank, (3, 3)))
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=as_dense)
        grad = tape.gradient(loss, table)
        check(isinstance(grad, tf.IndexedSlices) != as_dense,
              "gradient type %s" % type(grad).__name__)
        exp = np.zeros((6, 3))
        for r in range(size):
            np.add.at(exp, rows(r), rank_values(70, r, (3, 3)))
        close(tf.convert_to_tensor(grad), exp / size, "dense gradient")

    def partial(scale_local):
        keras.utils.set_random_seed(7)  # same weights on every rank
        shared = keras.layers.Dense(3)
        local = keras.layers.Dense(2)
        x = tf.constant(rank_values(80, rank, (5, 4)))
        shared.build((None, 4))
        local.build((None, 3))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(local(shared(x)))
        plain = tape.gradient(loss, shared.trainable_weights +
                              local.trainable_weights)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(local(shared(x)))
        tape = hvd.PartialDistributedGradientTape(
            tape, local_layers=[local], scale_local_gradients=scale_local)
        grads = tape.gradient(loss, shared.trainable_weights +
                              local.trainable_weights)
        n_shared = len(shared.trainable_weights)
        gathered = hvd.allgather_object([g.numpy() for g in plain])
        for i in range(n_shared):
            close(grads[i], np.mean([g[i] for g in gathered], axis=0),
                  "shared gradient %d" % i)
        factor = 1.0 / size if scale_local else 1.0
        for i in range(n_shared, len(grads)):
            close(grads[i], plain[i].numpy() * factor, "local gradient %d" % i)

    def register_local_source():
        ws = weights()
        with tf.GradientTape() as tape:
            loss = loss_of(ws, xs(90, rank))
        tape = hvd.DistributedGradientTape(tape)
        tape.register_local_source(ws[1])
        out = tape.gradient(loss, ws)
        exp = expected(90, size)
        close(out[0], exp[0], "reduced")
        close(out[1], xs(90, rank)[1] / size, "local")
        close(out[2], exp[2], "reduced")

    def errors():
        expect_raises(lambda: hvd.DistributedGradientTape(object()),
                      ValueError, "GradientTape")
        with tf.GradientTape() as tape:
            pass
        expect_raises(lambda: hvd.DistributedGradientTape(tape, op=hvd.Adasum),
                      NotImplementedError, "adasum")
        expect_raises(lambda: hvd.PartialDistributedGradientTape(
            tape, local_layers=[object()]), ValueError, "layers")

    def groups_arguments():
        """As Horovod 0.28's tapes: an integer groups (or num_groups
        standing for it) must be > 0 (ValueError showing the value);
        num_groups warns (DeprecationWarning at the caller's line) and
        yields to groups when both are given."""
        with tf.GradientTape() as tape:
            pass
        for wrap in (hvd.DistributedGradientTape,
                     hvd.PartialDistributedGradientTape):
            for kwargs in ({"groups": 0}, {"groups": -2},
                           {"num_groups": -1}, {"groups": 1.5}):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    err = expect_raises(lambda: wrap(tape, **kwargs),
                                        ValueError, "groups")
                value = repr(list(kwargs.values())[0])
                check(value in str(err), "%s %s: message does not show the "
                      "value: %s" % (wrap.__name__, kwargs, err))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wrapped = wrap(tape, num_groups=2)
            found = [w for w in caught
                     if issubclass(w.category, DeprecationWarning)]
            check(len(found) == 1 and "num_groups" in str(found[0].message),
                  "%s num_groups=2 warned %r" % (
                      wrap.__name__, [str(w.message) for w in found]))
            check(found and found[0].filename == __file__,
                  "%s: the warning points at %s, not the caller" % (
                      wrap.__name__, found and found[0].filename))
            check(wrapped._hb_reducer.groups == 2,
                  "num_groups=2 gave groups %r" % (wrapped._hb_reducer.groups,))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wrapped = wrap(tape, num_groups=3, groups=1)
            check(wrapped._hb_reducer.groups == 1,
                  "groups=1 with num_groups=3 gave %r" % (
                      wrapped._hb_reducer.groups,))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                wrap(tape, groups=2)
            check(not [w for w in caught
                       if issubclass(w.category, DeprecationWarning)],
                  "%s groups=2 warned" % wrap.__name__)

    table = {
        "class": class_,
        "eager": lambda: check_mean(grads_with(10), 10),
        "tf_function": lambda: check_mean(grads_with(20, "tf.function"), 20),
        "wrap_inside_with": wrap_inside_with,
        "persistent": persistent,
        "nested_sources": nested_sources,
        "unconnected_none": unconnected_none,
        "op_sum": lambda: check_mean(grads_with(100, op=hvd.Sum), 100,
                                     scale=size),
        "fp16": lambda: check_mean(
            grads_with(110, compression=Compression.fp16), 110, rtol=2e-3,
            atol=2e-3),
        "groups": lambda: check_mean(grads_with(120, "tf.function",
                                                num_groups=2), 120),
        "sparse": lambda: sparse(False),
        "sparse_as_dense": lambda: sparse(True),
        "partial_local_layer": lambda: partial(True),
        "partial_unscaled": lambda: partial(False),
        "register_local_source": register_local_source,
        "errors": errors,
        "groups_arguments": groups_arguments,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
