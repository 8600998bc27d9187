"""hbcore_tf.data data-sync cases (HybridBackend's unbalanced input), with
Keras 3 by default or tf_keras when TF_USE_LEGACY_KERAS=1.

Rank r holds NB(r) = 2 + 3 r batches of BATCH examples (2, 5, 8 at three
ranks). Every rank can compute every rank's data, so each rank simulates
the whole job in numpy (closed-form gradients of a linear model under the
mean squared error; no TensorFlow, no hbcore): with drop_remainder=True
min(NB) steps over every rank's batches; with drop_remainder=False max(NB)
steps, each step's gradient averaged over the ranks that still had a
batch. The Embedding classifier case uses the same model in plain
single-process TensorFlow as its reference instead. Step counts and final
weights must equal the reference and be identical on every rank. Two
epochs wherever a loop can repeat. ``empty_batch_layers`` checks the
table of built-in layers and losses in docs/hybridbackend_data_sync.md.

Run by tests/tf/test_hb_data_sync.py under hbrun.
"""

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,
                          identical_on_all_ranks, rank_values, report, tf)

import hbcore_tf as hvd  # noqa: E402
import hbcore_tf.data as hbd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = keras.__name__ == "tf_keras"

# Cases that use Keras' model.fit run in both Keras flavours; the others
# (v1 graphs, custom loops, errors) only in the Keras 3 launch.
FIT_CASES = ["fit_drop", "fit_keep", "fit_keep_sample_weight",
             "fit_keep_classifier", "empty_batch_layers"]
CASES = ["errors", "empty_batch_structure", "default_from_option",
         "v1_monitored_drop", "v1_monitored_keep", "v1_monitored_max_steps",
         "v1_detect_end_drop", "v1_detect_end_keep",
         "v1_detect_end_initializable",
         "v1_initializable_two_epochs", "loop_eager_drop", "loop_eager_keep",
         "loop_tf_function_drop", "loop_tf_function_keep",
         "loop_dict_keep", "loop_inside_tf_function_keep", "early_stop",
         "fit_drop", "fit_keep", "fit_keep_sample_weight",
         "fit_keep_classifier", "empty_batch_layers"]
assert CASES[-len(FIT_CASES):] == FIT_CASES
BATCH = 4
DIM = 3
LR = 0.1
EPOCHS = 2


def nb(rank):
    return 2 + 3 * rank


def rank_data(rank, seed=0):
    n = nb(rank) * BATCH
    x = rank_values(10 + seed, rank, (n, DIM))
    y = rank_values(20 + seed, rank, (n, 1))
    sw = np.abs(rank_values(30 + seed, rank, (n,))) + 0.5
    return x, y, sw


def initial_weights():
    rng = np.random.default_rng(7)
    return (rng.uniform(-0.5, 0.5, (DIM, 1)).astype(np.float32),
            rng.uniform(-0.5, 0.5, (1,)).astype(np.float32))


# --- the independent simulation (numpy, float64) ---------------------------------

def sim_grad(w, b, x, y, sw=None):
    """Gradient of mean_i sw_i (x_i w + b - y_i)^2 (Keras' MSE, reduced
    'sum over batch size')."""
    s = np.ones(len(x)) if sw is None else sw
    g_pred = 2.0 * s[:, None] * (x @ w + b - y) / len(x)
    return x.T @ g_pred, g_pred.sum(axis=0)


def simulate(size, drop, epochs=EPOCHS, weighted=False):
    """(steps per epoch, final w, final b)."""
    w, b = [a.astype(np.float64) for a in initial_weights()]
    data = [[a.astype(np.float64) for a in rank_data(r)] for r in range(size)]
    counts = [nb(r) for r in range(size)]
    steps = min(counts) if drop else max(counts)
    for _ in range(epochs):
        for s in range(steps):
            grads = []
            for r in range(size):
                if s < counts[r]:
                    x, y, sw = (a[s * BATCH:(s + 1) * BATCH] for a in data[r])
                    grads.append(sim_grad(w, b, x, y, sw if weighted else None))
            w = w - LR * np.mean([g[0] for g in grads], axis=0)
            b = b - LR * np.mean([g[1] for g in grads], axis=0)
    return steps, w, b


def check_result(what, size, drop, steps, w, b, weighted=False,
                 epochs=EPOCHS):
    want_steps, want_w, want_b = simulate(size, drop, epochs, weighted)
    check(list(steps) == [want_steps] * epochs,
          "%s: steps per epoch %s, expected %s" % (
              what, list(steps), [want_steps] * epochs))
    close(w, want_w, what + " kernel", rtol=1e-4, atol=1e-5)
    close(b, want_b, what + " bias", rtol=1e-4, atol=1e-5)
    identical_on_all_ranks([np.asarray(w), np.asarray(b)], what)


def dataset(rank, kind="tuple"):
    x, y, sw = rank_data(rank)
    if kind == "dict":
        slices = {"x": x, "y": y}
    elif kind == "weighted":
        slices = (x, y, sw)
    else:
        slices = (x, y)
    return tf.data.Dataset.from_tensor_slices(slices).batch(BATCH)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def errors():
        ok = dataset(rank)
        expect_raises(lambda: hbd.synchronized([1, 2]), TypeError,
                      "tf.data.Dataset")
        expect_raises(lambda: hbd.synchronized(ok, drop_remainder="yes"),
                      TypeError, "drop_remainder")
        unknown = tf.data.Dataset.from_generator(
            lambda: iter(()), output_signature={
                "ids": tf.TensorSpec([None, None], tf.int64),
                "x": tf.TensorSpec([None, 2], tf.float32)})
        expect_raises(lambda: hbd.synchronized(unknown), ValueError,
                      "component \"['ids']\"")
        expect_raises(lambda: hbd.synchronized(unknown), ValueError,
                      "unknown size in non-batch dimension 1")
        expect_raises(lambda: hbd.synchronized(tf.data.Dataset.range(3)),
                      ValueError, "scalar")
        ragged = tf.data.Dataset.from_generator(
            lambda: iter(()), output_signature=tf.RaggedTensorSpec(
                [None, None, None], tf.float32, ragged_rank=1))
        expect_raises(lambda: hbd.synchronized(ragged), ValueError,
                      "uniform inner dimension")
        expect_raises(lambda: hbd.synchronized(ok, drop_remainder="no"),
                      TypeError, "drop_remainder")
        expect_raises(lambda: hbd.make_one_shot_iterator(ok), RuntimeError,
                      "tf.compat.v1 graphs")
        with tf.Graph().as_default():
            it = hbd.make_one_shot_iterator(dataset(rank))
            it.get_next()
            expect_raises(it.get_next, ValueError, "one data-sync iterator")

    def empty_batch_structure():
        # Dense, ragged and sparse components; the empty batches keep the
        # structure, the types and the non-batch dimensions.
        n = nb(rank) * BATCH
        lengths = np.arange(n) % 3
        ragged = tf.RaggedTensor.from_row_lengths(
            np.arange(lengths.sum(), dtype=np.int64), lengths)
        base = tf.data.Dataset.from_tensor_slices(
            {"dense": rank_values(1, rank, (n, 2)), "ragged": ragged,
             "label": np.zeros(n, np.int32)})
        ds = base.batch(BATCH).map(lambda e: dict(
            e, sparse=tf.sparse.from_dense(tf.cast(e["ragged"].to_tensor(
                shape=[None, 5]), tf.float32))))
        rows = []
        for e in hbd.synchronized(ds, drop_remainder=False):
            check(isinstance(e["ragged"], tf.RaggedTensor) and
                  isinstance(e["sparse"], tf.SparseTensor),
                  "component types changed: %s" % {k: type(v).__name__
                                                   for k, v in e.items()})
            check(e["dense"].shape[1] == 2 and
                  int(e["sparse"].dense_shape[1]) == 5,
                  "non-batch dims changed: %s %s" % (
                      e["dense"].shape, e["sparse"].dense_shape))
            r = [int(e["dense"].shape[0]), int(e["ragged"].nrows()),
                 int(e["sparse"].dense_shape[0]), int(e["label"].shape[0])]
            check(len(set(r)) == 1, "batch sizes disagree: %s" % r)
            rows.append(r[0])
        most = max(nb(k) for k in range(size))
        want = [BATCH] * nb(rank) + [0] * (most - nb(rank))
        check(rows == want, "batch sizes %s, expected %s" % (rows, want))
        weights = [float(hbd.batch_weight(e)) for e in
                   hbd.synchronized(ds, drop_remainder=False)]
        check(weights == [1.0 if k else 0.0 for k in want],
              "batch weights %s" % weights)

    def default_from_option():
        with hvd.scope(data_sync_drop_remainder=False):
            count = len(list(hbd.synchronized(dataset(rank))))
        check(count == max(nb(k) for k in range(size)),
              "hb.scope(data_sync_drop_remainder=False): %d batches" % count)
        count = len(list(hbd.synchronized(dataset(rank))))
        check(count == min(nb(k) for k in range(size)),
              "default: %d batches" % count)

    # --- tf.compat.v1 graphs ------------------------------------------------------

    def v1_model(x, y):
        w0, b0 = initial_weights()
        w = tf.compat.v1.get_variable("w", initializer=w0)
        b = tf.compat.v1.get_variable("b", initializer=b0)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        opt = hvd.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LR))
        return w, b, opt.minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step())

    class Capture(tf.compat.v1.train.SessionRunHook):
        def __init__(self, tensors):
            self.tensors = tensors
            self.values = None

        def end(self, session):
            self.values = session.run(self.tensors)

    def v1_monitored(drop, max_steps=None):
        with tf.Graph().as_default():
            # Each pass of the one-shot iterator is one epoch.
            it = hbd.make_one_shot_iterator(dataset(rank).repeat(EPOCHS),
                                            drop_remainder=drop)
            x, y = it.get_next()
            w, b, train_op = v1_model(x, y)
            capture = Capture([w, b])
            hooks = [capture]
            if max_steps:
                # Stops before the data ends; nothing may be left pending.
                hooks.append(tf.compat.v1.train.StopAtStepHook(
                    last_step=max_steps))
            steps = 0
            with tf.compat.v1.train.MonitoredTrainingSession(
                    hooks=hooks, save_checkpoint_secs=None,
                    save_summaries_steps=None, log_step_count_steps=None
                    ) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
                    steps += 1
        # The repeated dataset is one long pass: both epochs' batches of a
        # rank follow each other, so simulate with one epoch of twice the
        # batches.
        want = simulate_repeated(size, drop, max_steps)
        check(steps == want[0], "v1 steps %d, expected %d" % (steps, want[0]))
        close(capture.values[0], want[1], "v1 kernel", rtol=1e-4, atol=1e-5)
        close(capture.values[1], want[2], "v1 bias", rtol=1e-4, atol=1e-5)
        identical_on_all_ranks(capture.values, "v1 weights")

    def v1_detect_end(drop, initializable=False):
        # hb.train.MonitoredTrainingSession stops after the last step (as
        # HybridBackend's detect-end): no step fails with OutOfRangeError,
        # so the code after the loop inside the with block runs. A run
        # that takes no batch between steps neither consumes data nor
        # stops the session early.
        with tf.Graph().as_default():
            ds = dataset(rank).repeat(EPOCHS)
            it = (hbd.make_initializable_iterator(ds, drop_remainder=drop)
                  if initializable else
                  hbd.make_one_shot_iterator(ds, drop_remainder=drop))
            x, y = it.get_next()
            w, b, train_op = v1_model(x, y)
            step = tf.compat.v1.train.get_global_step()
            capture = Capture([w, b])
            steps, after_loop, global_steps = 0, False, []
            scaffold = tf.compat.v1.train.Scaffold(
                local_init_op=tf.group(
                    tf.compat.v1.local_variables_initializer(),
                    it.initializer) if initializable else None)
            with hvd.train.MonitoredTrainingSession(
                    hooks=[capture], scaffold=scaffold,
                    save_checkpoint_secs=None, save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                while not sess.should_stop():
                    global_steps.append(sess.run(step))  # takes no batch
                    sess.run(train_op)
                    steps += 1
                after_loop = True
        want = simulate_repeated(size, drop, None)
        check(after_loop, "the loop did not end by should_stop() (a step "
              "raised OutOfRangeError)")
        check(steps == want[0], "steps %d, expected %d" % (steps, want[0]))
        check(global_steps == list(range(want[0])),
              "global steps before each step %s" % global_steps)
        close(capture.values[0], want[1], "v1 kernel", rtol=1e-4, atol=1e-5)
        close(capture.values[1], want[2], "v1 bias", rtol=1e-4, atol=1e-5)
        identical_on_all_ranks(capture.values, "v1 weights")

    def v1_initializable_two_epochs():
        with tf.Graph().as_default():
            it = hbd.make_initializable_iterator(dataset(rank),
                                                 drop_remainder=False)
            x, y = it.get_next()
            w, b, train_op = v1_model(x, y)
            steps = []
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for _ in range(EPOCHS):
                    sess.run(it.initializer)
                    count = 0
                    while True:
                        try:
                            sess.run(train_op)
                        except tf.errors.OutOfRangeError:
                            break
                        count += 1
                    steps.append(count)
                values = sess.run([w, b])
        check_result("v1 initializable", size, False, steps, *values)

    # --- custom TF2 loops -----------------------------------------------------------

    def make_step(w, b, compiled):
        def step(x, y):
            with hbd.step_weight(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
                tape = hvd.DistributedGradientTape(tape)
                gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(LR * gw)
            b.assign_sub(LR * gb)
        return tf.function(step, reduce_retracing=True) if compiled else step

    def loop_case(drop, compiled, kind="tuple"):
        w0, b0 = initial_weights()
        w, b = tf.Variable(w0), tf.Variable(b0)
        step = make_step(w, b, compiled)
        ds = hbd.synchronized(dataset(rank, kind), drop_remainder=drop)
        steps = []
        for _ in range(EPOCHS):
            count = 0
            for batch in ds:
                x, y = (batch["x"], batch["y"]) if kind == "dict" else batch
                step(x, y)
                count += 1
            steps.append(count)
        check_result("loop", size, drop, steps, w.numpy(), b.numpy())

    def loop_inside_tf_function_keep():
        # The whole epoch is one tf.function: AutoGraph turns the loop over
        # the dataset into a while loop; the sync runs in the iterator.
        w0, b0 = initial_weights()
        w, b = tf.Variable(w0), tf.Variable(b0)
        step = make_step(w, b, compiled=False)
        ds = hbd.synchronized(dataset(rank), drop_remainder=False)

        @tf.function
        def epoch():
            count = tf.constant(0)
            for x, y in ds:
                step(x, y)
                count += 1
            return count

        steps = [int(epoch()) for _ in range(EPOCHS)]
        check_result("loop in tf.function", size, False, steps, w.numpy(),
                     b.numpy())

    def early_stop():
        # A loop that stops before the data ends (a step limit) stops at
        # the same element on every rank; the next passes still match.
        ds = hbd.synchronized(dataset(rank), drop_remainder=True)
        for limit in (1, 2):
            it = iter(ds)
            for _ in range(limit):
                next(it)
            del it
        count = len(list(ds))
        check(count == min(nb(k) for k in range(size)),
              "after early stops: %d batches" % count)
        # A prefetch after the sync is safe for passes run to their end.
        counts = [len(list(ds.prefetch(2))) for _ in range(2)]
        check(counts == [count] * 2, "prefetched passes: %s" % counts)

    # --- Keras model.fit ------------------------------------------------------------

    class CountSteps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = []

        def on_epoch_begin(self, epoch, logs=None):
            self.steps.append(0)

        def on_train_batch_end(self, batch, logs=None):
            self.steps[-1] += 1

    def fit_case(drop, weighted=False):
        # A model and optimizer built in hb.scope: data-parallel, and the
        # train step pushes the data-sync step weight of its batch.
        with hvd.scope():
            inputs = keras.Input(shape=(DIM,))
            dense = keras.layers.Dense(1)
            model = keras.Model(inputs, dense(inputs))
            dense.set_weights(list(initial_weights()))
            opt = keras.optimizers.SGD(LR)
            model.compile(optimizer=opt, loss="mse", jit_compile=False)
        counter = CountSteps()
        ds = hbd.synchronized(dataset(rank, "weighted" if weighted else
                                      "tuple"), drop_remainder=drop)
        model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=[counter])
        w, b = dense.get_weights()
        check_result("fit", size, drop, counter.steps, w, b, weighted)

    def fit_keep_classifier():
        # Embedding + Dense + sigmoid under binary cross-entropy: the layers
        # and the loss accept the empty batches of the ranks that ran out.
        # Reference: the same model in plain single-process TensorFlow,
        # each step's gradient the mean over the ranks that had a batch.
        vocab, width = 6, 3

        def build():
            ids = keras.Input(shape=(2,), dtype="int32")
            emb = keras.layers.Embedding(vocab, width)(ids)
            flat = keras.layers.Flatten()(emb)
            out = keras.layers.Dense(1, activation="sigmoid")(flat)
            return ids, out

        def ids_labels(r):
            rng = np.random.default_rng([5, r])
            n = nb(r) * BATCH
            return (rng.integers(0, vocab, (n, 2)).astype(np.int32),
                    rng.integers(0, 2, (n, 1)).astype(np.float32))

        rng = np.random.default_rng(11)
        init = [rng.uniform(-0.5, 0.5, (vocab, width)).astype(np.float32),
                rng.uniform(-0.5, 0.5, (2 * width, 1)).astype(np.float32),
                np.zeros(1, np.float32)]
        with hvd.scope():
            ids, out = build()
            model = keras.Model(ids, out)
            model.set_weights(init)
            model.compile(optimizer=keras.optimizers.SGD(LR),
                          loss="binary_crossentropy", jit_compile=False)
        ds = hbd.synchronized(tf.data.Dataset.from_tensor_slices(
            ids_labels(rank)).batch(BATCH), drop_remainder=False)
        counter = CountSteps()
        model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=[counter])

        # Plain TF reference (no Keras, no hbcore).
        ref = [tf.Variable(v) for v in init]
        data = [ids_labels(r) for r in range(size)]
        steps = max(nb(r) for r in range(size))
        for _ in range(EPOCHS):
            for s in range(steps):
                grads = []
                for r in range(size):
                    if s >= nb(r):
                        continue
                    x = data[r][0][s * BATCH:(s + 1) * BATCH]
                    y = data[r][1][s * BATCH:(s + 1) * BATCH]
                    with tf.GradientTape() as tape:
                        h = tf.reshape(tf.gather(ref[0], x), [len(x), -1])
                        p = tf.sigmoid(tf.matmul(h, ref[1]) + ref[2])
                        p = tf.clip_by_value(p, 1e-7, 1 - 1e-7)
                        loss = -tf.reduce_mean(y * tf.math.log(p) +
                                               (1 - y) * tf.math.log(1 - p))
                    grads.append(tape.gradient(loss, ref))
                for v, *gs in zip(ref, *grads):
                    v.assign_sub(LR * tf.add_n([tf.convert_to_tensor(g)
                                                for g in gs]) / len(gs))
        check(counter.steps == [steps] * EPOCHS,
              "classifier steps %s" % counter.steps)
        for i, (got, want) in enumerate(zip(model.get_weights(), ref)):
            close(got, want.numpy(), "classifier weight %d" % i, rtol=1e-4,
                  atol=1e-5)
        identical_on_all_ranks(model.get_weights(), "classifier weights")

    def empty_batch_layers():
        # What docs/hybridbackend_data_sync.md says about built-in layers and
        # losses on the empty batches of drop_remainder=False.
        layers = keras.layers
        x = tf.zeros([0, DIM])
        for layer, inp, out_shape in [
                (layers.Dense(2), x, (0, 2)),
                (layers.Embedding(5, 2), tf.zeros([0, 4], tf.int32),
                 (0, 4, 2)),
                (layers.LayerNormalization(), x, (0, DIM)),
                (layers.Dropout(0.5), x, (0, DIM)),
                (layers.Flatten(), tf.zeros([0, 2, DIM]), (0, 2 * DIM)),
                (layers.GlobalAveragePooling1D(), tf.zeros([0, 2, DIM]),
                 (0, DIM)),
                (layers.Concatenate(), [x, x], (0, 2 * DIM))]:
            got = layer(inp, training=True)
            check(tuple(got.shape) == out_shape, "%s on an empty batch: %s" %
                  (type(layer).__name__, got.shape))
        dense = layers.Dense(4)
        dense(tf.ones([1, DIM]))
        for loss, y in [
                (keras.losses.MeanSquaredError(), tf.zeros([0, 4])),
                (keras.losses.MeanAbsoluteError(), tf.zeros([0, 4])),
                (keras.losses.Huber(), tf.zeros([0, 4])),
                (keras.losses.BinaryCrossentropy(), tf.zeros([0, 4])),
                (keras.losses.BinaryCrossentropy(from_logits=True),
                 tf.zeros([0, 4])),
                (keras.losses.CategoricalCrossentropy(from_logits=True),
                 tf.zeros([0, 4])),
                (keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                 tf.zeros([0], tf.int32))]:
            with tf.GradientTape() as tape:
                value = loss(y, dense(x))
            grads = tape.gradient(value, dense.trainable_weights)
            check(all(g is not None and np.all(g.numpy() == 0) for g in grads),
                  "%s: gradient of an empty batch is not zero" %
                  type(loss).__name__)
        # BatchNormalization's moving statistics become NaN on a rank that
        # trains on an empty batch (the mean over 0 examples) ...
        bn = layers.BatchNormalization()
        bn(tf.ones([2, DIM]), training=True)
        bn(x, training=True)
        check(np.isnan(bn.moving_mean.numpy()).all(),
              "BatchNormalization kept finite statistics on an empty batch")
        # ... SyncBatchNormalization's do not: it averages over the global
        # batch, here the batches of every rank but rank 0.
        sbn = hvd.SyncBatchNormalization(momentum=0.5)
        sbn(tf.ones([1, DIM]), training=False)
        mine = x if rank == 0 else tf.constant(rank_values(3, rank,
                                                           (BATCH, DIM)))
        sbn(mine, training=True)
        rows = np.concatenate([rank_values(3, r, (BATCH, DIM))
                               for r in range(1, size)]).astype(np.float64)
        close(sbn.moving_mean, 0.5 * rows.mean(axis=0),
              "SyncBatchNormalization moving mean")
        close(sbn.moving_variance, 0.5 + 0.5 * rows.var(axis=0),
              "SyncBatchNormalization moving variance", rtol=1e-4)

    table = {
        "errors": errors,
        "empty_batch_structure": empty_batch_structure,
        "default_from_option": default_from_option,
        "v1_monitored_drop": lambda: v1_monitored(True),
        "v1_monitored_keep": lambda: v1_monitored(False),
        "v1_monitored_max_steps": lambda: v1_monitored(False, max_steps=3),
        "v1_detect_end_drop": lambda: v1_detect_end(True),
        "v1_detect_end_keep": lambda: v1_detect_end(False),
        "v1_detect_end_initializable": lambda: v1_detect_end(
            False, initializable=True),
        "v1_initializable_two_epochs": v1_initializable_two_epochs,
        "loop_eager_drop": lambda: loop_case(True, False),
        "loop_eager_keep": lambda: loop_case(False, False),
        "loop_tf_function_drop": lambda: loop_case(True, True),
        "loop_tf_function_keep": lambda: loop_case(False, True),
        "loop_dict_keep": lambda: loop_case(False, True, "dict"),
        "loop_inside_tf_function_keep": loop_inside_tf_function_keep,
        "early_stop": early_stop,
        "fit_drop": lambda: fit_case(True),
        "fit_keep": lambda: fit_case(False),
        "fit_keep_sample_weight": lambda: fit_case(False, weighted=True),
        "fit_keep_classifier": fit_keep_classifier,
        "empty_batch_layers": empty_batch_layers,
    }
    skip = [c for c in CASES if c not in FIT_CASES] if LEGACY else []
    run_table(checker, table, CASES, skip=skip)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


def simulate_repeated(size, drop, max_steps=None):
    """simulate() for a dataset repeated EPOCHS times into one pass: rank
    r holds EPOCHS * NB(r) batches (its data, then its data again)."""
    w, b = [a.astype(np.float64) for a in initial_weights()]
    data = [[np.concatenate([a] * EPOCHS).astype(np.float64)
             for a in rank_data(r)[:2]] for r in range(size)]
    counts = [EPOCHS * nb(r) for r in range(size)]
    steps = min(counts) if drop else max(counts)
    steps = min(steps, max_steps or steps)
    for s in range(steps):
        grads = [sim_grad(w, b, *(a[s * BATCH:(s + 1) * BATCH]
                                  for a in data[r]))
                 for r in range(size) if s < counts[r]]
        w = w - LR * np.mean([g[0] for g in grads], axis=0)
        b = b - LR * np.mean([g[1] for g in grads], axis=0)
    return steps, w, b


if __name__ == "__main__":
    main()
