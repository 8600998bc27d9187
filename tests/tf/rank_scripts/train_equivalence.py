"""N ranks on N shards == one process on the whole batch.

Every rank trains the same initial model on its shard of each global batch
with a distributed optimizer or tape, and also trains a reference copy
locally, without hbcore, on the whole global batch (the single-process
run). Averaging the shards' mean-loss gradients equals the whole batch's
mean-loss gradient, so the weights must agree to float tolerance after
several steps, for every path: Keras model.fit (Keras 3 or tf_keras),
a custom loop with DistributedOptimizer, DistributedGradientTape (eager and
tf.function), tf.compat.v1 graphs, and local aggregation
(backward_passes_per_step=2: each update = two local micro-batches per rank
= one reference batch twice as large).
Run by tests/tf/test_training_equivalence.py under hbrun.
"""
import numpy as np

from train_common import run_table  # noqa: E402
from train_common import Checker, close, report, tf

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = _compat.use_legacy_keras()

CASES = [
    "keras_fit", "keras_fit_adam", "keras_fit_bpps2", "keras_custom_loop",
    "tape_eager", "tape_function", "v1_graph", "v1_graph_bpps2",
    "legacy_optimizer_fit", "legacy_optimizer_fit_bpps2",
]
LEGACY_ONLY = ["legacy_optimizer_fit", "legacy_optimizer_fit_bpps2"]
STEPS = 4       # optimizer updates
BATCH = 4       # rows per rank per backward pass
FEATURES = 5
LR = 0.1
TOL = {"rtol": 1e-5, "atol": 1e-6}


def global_data(size, passes=1):
    """x, y of shape (STEPS * passes, size, BATCH, ...): pass k of rank r is
    [k, r]; the same on every rank."""
    rng = np.random.default_rng(2024)
    x = rng.normal(size=(STEPS * passes, size, BATCH, FEATURES)).astype(
        np.float32)
    w = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    y = np.tanh(x @ w) + 0.1 * rng.normal(size=x.shape[:-1] + (1,)).astype(
        np.float32)
    return x, y


def shard(array, rank):
    """Rank ``rank``'s rows in pass order."""
    return array[:, rank].reshape(-1, array.shape[-1])


def whole(array):
    """All rows in pass order; a batch of size*BATCH*passes rows is one
    reference step."""
    return array.reshape(-1, array.shape[-1])


def make_model():
    keras.utils.set_random_seed(77)  # same initial weights on every rank
    return keras.Sequential([keras.Input((FEATURES,)),
                             keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def compare(model, reference, what, **tol):
    tol = tol or TOL
    for i, (a, b) in enumerate(zip(model.get_weights(),
                                   reference.get_weights())):
        close(a, b, "%s: weight %d" % (what, i), **tol)
    initial = make_model().get_weights()
    moved = max(np.max(np.abs(a - b)) for a, b in
                zip(model.get_weights(), initial))
    if moved < 1e-4:
        raise AssertionError("%s: weights barely moved (%g)" % (what, moved))


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def fit_case(make_opt, passes=1, tol=None, **dist_kwargs):
        x, y = global_data(size, passes)
        model = make_model()
        model.compile(optimizer=hvd.DistributedOptimizer(
            make_opt(), backward_passes_per_step=passes,
            average_aggregated_gradients=True, **dist_kwargs), loss="mse")
        model.fit(shard(x, rank), shard(y, rank), batch_size=BATCH,
                  shuffle=False, epochs=1, verbose=0)
        reference = make_model()
        reference.compile(optimizer=make_opt(), loss="mse")
        reference.fit(whole(x), whole(y), batch_size=BATCH * size * passes,
                      shuffle=False, epochs=1, verbose=0)
        compare(model, reference, "fit", **(tol or {}))

    def loss_fn(model, xb, yb):
        return tf.reduce_mean(tf.square(model(xb) - yb))

    def reference_loop():
        x, y = global_data(size)
        reference = make_model()
        opt = keras.optimizers.SGD(LR)
        for k in range(STEPS):
            with tf.GradientTape() as tape:
                loss = loss_fn(reference, whole(x[k:k + 1]),
                               whole(y[k:k + 1]))
            variables = reference.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return reference

    def custom_loop():
        x, y = global_data(size)
        model = make_model()
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR))

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(model, xb, yb)
            variables = model.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        for k in range(STEPS):
            step(x[k, rank], y[k, rank])
        compare(model, reference_loop(), "custom loop")

    def tape_case(function):
        x, y = global_data(size)
        model = make_model()
        opt = keras.optimizers.SGD(LR)

        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = loss_fn(model, xb, yb)
            tape = hvd.DistributedGradientTape(tape)
            variables = model.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if function:
            step = tf.function(step)
        for k in range(STEPS):
            step(tf.constant(x[k, rank]), tf.constant(y[k, rank]))
        compare(model, reference_loop(), "tape")

    def v1_case(passes):
        v1 = tf.compat.v1
        x, y = global_data(size, passes)
        initial = [w for w in make_model().get_weights()]

        def train(distributed, xs, ys, batch):
            with tf.Graph().as_default():
                ws = [v1.Variable(w) for w in initial]
                xb = v1.placeholder(tf.float32, (None, FEATURES))
                yb = v1.placeholder(tf.float32, (None, 1))
                h = tf.tanh(tf.matmul(xb, ws[0]) + ws[1])
                h = tf.tanh(tf.matmul(h, ws[2]) + ws[3])
                loss = tf.reduce_mean(tf.square(tf.matmul(h, ws[4]) + ws[5]
                                                - yb))
                opt = v1.train.GradientDescentOptimizer(LR)
                if distributed:
                    opt = hvd.DistributedOptimizer(
                        opt, backward_passes_per_step=passes,
                        average_aggregated_gradients=True)
                train_op = opt.minimize(loss)
                with v1.Session() as sess:
                    sess.run([v1.global_variables_initializer(),
                              v1.local_variables_initializer()])
                    for k in range(len(xs) // batch):
                        sess.run(train_op, {xb: xs[k * batch:(k + 1) * batch],
                                            yb: ys[k * batch:(k + 1) * batch]})
                    return sess.run(ws)

        got = train(True, shard(x, rank), shard(y, rank), BATCH)
        want = train(False, whole(x), whole(y), BATCH * size * passes)
        for i, (a, b) in enumerate(zip(got, want)):
            close(a, b, "v1 weight %d" % i, **TOL)

    def legacy_sgd():
        return keras.optimizers.legacy.SGD(LR)

    table = {
        "keras_fit": lambda: fit_case(lambda: keras.optimizers.SGD(LR)),
        "keras_fit_adam": lambda: fit_case(
            lambda: keras.optimizers.Adam(0.01), tol={"rtol": 1e-4,
                                                      "atol": 1e-5}),
        "keras_fit_bpps2": lambda: fit_case(lambda: keras.optimizers.SGD(LR),
                                            passes=2),
        "keras_custom_loop": custom_loop,
        "tape_eager": lambda: tape_case(False),
        "tape_function": lambda: tape_case(True),
        "v1_graph": lambda: v1_case(1),
        "v1_graph_bpps2": lambda: v1_case(2),
        "legacy_optimizer_fit": lambda: fit_case(legacy_sgd),
        "legacy_optimizer_fit_bpps2": lambda: fit_case(legacy_sgd, passes=2),
    }
    run_table(checker, table, CASES, skip=() if LEGACY else LEGACY_ONLY)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
