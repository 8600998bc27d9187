"""hbcore_tf.keras cases: callbacks, load_model, the Keras-level ops, with
Keras 3 by default or tf_keras when TF_USE_LEGACY_KERAS=1 (the script
reads the Keras in use from hbcore_tf._base.compat, as hbcore_tf.keras does).

Expected values are computed here independently: learning rates from the
formulas in the cases, averaged metrics with numpy from every rank's raw
values. Run by tests/tf/test_keras.py under hbrun.
"""
import os
import warnings

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,
                          identical_on_all_ranks, rank_values, report)

import hbcore  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = _compat.use_legacy_keras()

CASES = [
    "broadcast_callback", "metric_average", "lr_warmup",
    "lr_schedule_staircase", "lr_schedule_constant", "lr_schedule_smooth",
    "momentum_correction", "no_momentum_correction",
    "momentum_correction_legacy_optimizer", "load_model", "keras_ops",
    "xla_refused",
]
LEGACY_ONLY = ["momentum_correction_legacy_optimizer"]
STEPS = 4   # batches per epoch
BATCH = 8


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)),
                             keras.layers.Dense(6, activation="tanh"),
                             keras.layers.Dense(1)])


def data(rank, n=STEPS * BATCH):
    x = rank_values(500, rank, (n, 4))
    return x, x.sum(axis=1, keepdims=True) * 0.5


def weights_of(model):
    return [np.array(w) for w in model.get_weights()]


class Recorder(keras.callbacks.Callback):
    """Records what the callbacks placed before it left behind."""

    def __init__(self, momentum=False):
        super().__init__()
        self.epoch = 0
        self.lrs = {}
        self.logs = {}
        self.batch0_weights = None
        self.begin_weights = None
        self.momentum = momentum
        self.buffers_begin, self.buffers_end = {}, {}

    def _buffers(self):
        return [np.array(_compat.unwrap_variable(b).numpy()) for b in
                _compat.momentum_buffers(self.model.optimizer)]

    def on_train_begin(self, logs=None):
        self.begin_weights = weights_of(self.model)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs[(self.epoch, batch)] = _compat.get_learning_rate(
            self.model.optimizer)
        if self.momentum:
            self.buffers_begin[(self.epoch, batch)] = self._buffers()

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 0 and batch == 0:
            self.batch0_weights = weights_of(self.model)
        if self.momentum:
            self.buffers_end[(self.epoch, batch)] = self._buffers()

    def on_epoch_end(self, epoch, logs=None):
        self.logs[epoch] = {k: float(v) for k, v in (logs or {}).items()}


class RankMetric(keras.callbacks.Callback):
    """Puts a rank-dependent number into the logs and keeps the raw ones."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank
        self.raw = {}

    def on_epoch_end(self, epoch, logs=None):
        logs["rank_metric"] = float((self.rank + 1) * (epoch + 1))
        self.raw[epoch] = {k: float(v) for k, v in logs.items()}


def fit(model, rank, callbacks, epochs, lr=0.05, momentum=0.0,
        optimizers=None, **kwargs):
    optimizers = optimizers or keras.optimizers
    opt = hvd.DistributedOptimizer(optimizers.SGD(lr, momentum=momentum))
    model.compile(optimizer=opt, loss="mse", **kwargs)
    x, y = data(rank)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False,
                     verbose=0, callbacks=callbacks)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def broadcast_callback():
        model = make_model(seed=100 + rank)  # different weights per rank
        root_initial = hbcore.broadcast_object(weights_of(model), 0)
        recorder = Recorder()
        fit(model, rank, [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                          recorder], epochs=1)
        for mine, root in zip(recorder.begin_weights, root_initial):
            close(mine, root, "weights at train begin vs rank 0's initial")
        identical_on_all_ranks(recorder.batch0_weights, "after batch 0")
        identical_on_all_ranks(weights_of(model), "after training")

    def metric_average():
        model = make_model(seed=1)
        raw = RankMetric(rank)
        recorder = Recorder()
        x, y = data(rank + 10, n=BATCH * 2)
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05))
        model.compile(optimizer=opt, loss="mse")
        model.fit(*data(rank), batch_size=BATCH, epochs=2, verbose=0,
                  validation_data=(x, y),
                  callbacks=[raw, hvd.callbacks.MetricAverageCallback(),
                             recorder])
        everyone = hbcore.allgather_object(raw.raw)
        for epoch in range(2):
            for key in ("loss", "val_loss", "rank_metric"):
                values = [r[epoch][key] for r in everyone]
                close(recorder.logs[epoch][key], np.mean(values),
                      "epoch %d %s" % (epoch, key), rtol=1e-6)
            close(recorder.logs[epoch]["rank_metric"],
                  (epoch + 1) * (size + 1) / 2.0, "rank_metric formula")

    def lr_warmup():
        initial, warmup = 0.4, 2
        recorder = Recorder()
        history = fit(make_model(1), rank,
                      [hvd.callbacks.LearningRateWarmupCallback(
                          initial, warmup_epochs=warmup), recorder],
                      epochs=3, lr=0.01)
        for (epoch, batch), lr in sorted(recorder.lrs.items()):
            if epoch < warmup:
                e = epoch + batch / STEPS + 1.0 / STEPS
                want = initial / size * (e * (size - 1) / warmup + 1)
            else:
                want = initial  # warmup ended exactly at initial_lr
            close(lr, want, "lr at epoch %d batch %d" % (epoch, batch),
                  rtol=1e-6)
        close(history.history["lr"][-1], initial, "logged lr", rtol=1e-6)

    def schedule_case(callback, expected_fn, epochs=4, lr=0.05):
        recorder = Recorder()
        fit(make_model(1), rank, [callback, recorder], epochs=epochs, lr=lr)
        for (epoch, batch), got in sorted(recorder.lrs.items()):
            close(got, expected_fn(epoch, batch),
                  "lr at epoch %d batch %d" % (epoch, batch), rtol=1e-6)

    def lr_schedule_staircase():
        def want(epoch, batch):
            if epoch < 1:
                return 0.05
            return 0.2 * 0.5 ** min(epoch, 2)  # end_epoch=3: keeps epoch 2's
        schedule_case(hvd.callbacks.LearningRateScheduleCallback(
            0.2, lambda e: 0.5 ** e, start_epoch=1, end_epoch=3), want)

    def lr_schedule_constant():
        # Horovod: a constant multiplier m is an exponential decay,
        # initial_lr * m ** (epoch - start_epoch) from start_epoch on.
        schedule_case(hvd.callbacks.LearningRateScheduleCallback(
            0.2, multiplier=0.25, start_epoch=2),
            lambda e, b: 0.05 if e < 2 else 0.2 * 0.25 ** (e - 2), lr=0.05)
        schedule_case(hvd.callbacks.LearningRateScheduleCallback(
            0.4, multiplier=0.5, start_epoch=1),
            lambda e, b: 0.05 if e < 1 else 0.4, epochs=2, lr=0.05)

    def lr_schedule_smooth():
        def want(epoch, batch):
            if epoch >= 2:
                return 0.1 * (1 + 1 + (STEPS - 1) / STEPS)
            return 0.1 * (1 + epoch + batch / STEPS)
        schedule_case(hvd.callbacks.LearningRateScheduleCallback(
            0.1, lambda e: 1 + e, end_epoch=2, staircase=False), want,
            epochs=3)

    def momentum_case(correction, optimizers=None):
        recorder = Recorder(momentum=True)
        fit(make_model(1), rank,
            [hvd.callbacks.LearningRateScheduleCallback(
                0.1, lambda e: 2.0 ** e, momentum_correction=correction),
             recorder], epochs=3, lr=0.1, momentum=0.9,
            optimizers=optimizers)
        keys = sorted(recorder.buffers_begin)
        changes = 0
        for prev, key in zip(keys, keys[1:]):
            before = recorder.buffers_end[prev]
            after = recorder.buffers_begin[key]
            check(len(after) == 2 * 2, "found %d momentum buffers" % len(after))
            ratio = recorder.lrs[key] / recorder.lrs[prev]
            if abs(ratio - 1.0) > 1e-6:
                changes += 1
            factor = ratio if correction else 1.0
            for b, a in zip(before, after):
                close(a, b * factor, "buffer at %s (lr ratio %g)" % (key, ratio),
                      rtol=1e-5, atol=1e-7)
        check(changes == 2, "expected 2 learning-rate changes, saw %d" % changes)

    def load_model():
        model = make_model(seed=3)
        fit(model, rank, [], epochs=1)
        suffix = ".h5" if LEGACY else ".keras"
        path = os.path.join(os.environ.get("HB_TEST_OUT", "/tmp"),
                            "model_rank%d%s" % (rank, suffix))
        model.save(path)
        loaded = hvd.load_model(path)
        opt = loaded.optimizer
        check(type(opt).__name__ == "SGD", "class %s" % type(opt).__name__)
        check(hasattr(opt, "_hb_runtime"), "optimizer not distributed")
        for a, b in zip(weights_of(loaded), weights_of(model)):
            close(a, b, "loaded weights")
        plain = keras.models.load_model(path)
        check(not hasattr(plain.optimizer, "_hb_runtime"),
              "plain load_model returned a distributed optimizer")
        # The loaded, distributed model keeps training in step on all ranks.
        x, y = data(rank)
        loaded.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                   callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        identical_on_all_ranks(weights_of(loaded), "loaded model after fit")

    def keras_ops():
        value = rank_values(600, rank, (3,))
        got = hvd.allreduce(value, name="keras_ops_allreduce")
        close(got, np.mean([rank_values(600, r, (3,)) for r in range(size)],
                           axis=0), "allreduce")
        gathered = hvd.allgather(np.full((rank + 1, 2), rank, np.float32),
                                 name="keras_ops_allgather")
        want = np.concatenate([np.full((r + 1, 2), r) for r in range(size)])
        close(gathered, want, "allgather")
        close(hvd.broadcast(value, 1 % size, name="keras_ops_broadcast"),
              rank_values(600, 1 % size, (3,)), "broadcast")
        expect_raises(lambda: hvd.broadcast_global_variables(0), RuntimeError)

    def xla_refused():
        """XLA never compiles a collective: a Keras 3 model with the
        distributed optimizer falls back to no XLA (and trains); a
        collective traced under tf.function(jit_compile=True) raises."""
        if not LEGACY:  # tf_keras compiles only when asked
            model = make_model(1)
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.compile(optimizer=opt, loss="mse", jit_compile=True)
            check(model.jit_compile is False, "model.jit_compile is %r"
                  % (model.jit_compile,))
            x, y = data(rank)
            model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
        import hbcore_tf
        import tensorflow as tf

        w = tf.Variable(tf.ones([2]))

        @tf.function(jit_compile=True)
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w * w)
            tape = hbcore_tf.DistributedGradientTape(tape)
            return tape.gradient(loss, [w])

        expect_raises(step, ValueError, "jit_compile=False")

    table = {
        "broadcast_callback": broadcast_callback,
        "metric_average": metric_average,
        "lr_warmup": lr_warmup,
        "lr_schedule_staircase": lr_schedule_staircase,
        "lr_schedule_constant": lr_schedule_constant,
        "lr_schedule_smooth": lr_schedule_smooth,
        "momentum_correction": lambda: momentum_case(True),
        "no_momentum_correction": lambda: momentum_case(False),
        "momentum_correction_legacy_optimizer": lambda: momentum_case(
            True, keras.optimizers.legacy),
        "load_model": load_model,
        "keras_ops": keras_ops,
        "xla_refused": xla_refused,
    }
    run_table(checker, table, CASES, skip=() if LEGACY else LEGACY_ONLY)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
