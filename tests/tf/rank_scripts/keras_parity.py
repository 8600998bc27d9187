"""hbcore_tf.keras against horovod.tensorflow.keras 0.28's documented
behaviour: the constant multiplier of LearningRateScheduleCallback (an
exponential decay from start_epoch), the required initial_lr,
steps_per_epoch=0, the warmup's end-of-warmup line (rank 0 only),
BroadcastGlobalVariablesCallback's local_variables, BestModelCheckpoint,
the Keras-level reducescatter and process-set names, and
DistributedOptimizer's num_groups / groups checks. Keras 3 by
default, tf_keras when TF_USE_LEGACY_KERAS=1. Run by
tests/tf/test_keras_parity.py at 2 and 3 ranks.

Expected values are computed here from the formulas written out in each
case (numpy), not by calling the callbacks' code.
"""
import contextlib
import io
import os
import warnings
from typing import Any, Dict, List

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,  # noqa: E402
                          rank_values, report)

import hbcore  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = _compat.use_legacy_keras()

CASES = [
    "schedule_constant_multiplier_decays",
    "schedule_constant_multiplier_smooth",
    "schedule_requires_initial_lr",
    "schedule_steps_per_epoch_zero",
    "warmup_line_on_rank0_only",
    "broadcast_local_variables",
    "broadcast_local_variables_checked",
    "best_model_checkpoint",
    "keras_reducescatter_and_names",
    "optimizer_groups_arguments",
]
STEPS = 4
BATCH = 8


def make_model(seed: int) -> Any:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)),
                             keras.layers.Dense(3, activation="tanh"),
                             keras.layers.Dense(1)])


def data(rank: int, n: int = STEPS * BATCH):
    x = rank_values(700, rank, (n, 4))
    return x, x.sum(axis=1, keepdims=True) * 0.5


class LrRecorder(keras.callbacks.Callback):
    """The learning rate at the start of every batch (after the callbacks
    placed before it)."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0
        self.lrs: Dict[tuple, float] = {}

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.lrs[(self.epoch, batch)] = _compat.get_learning_rate(
            self.model.optimizer)


def fit(model: Any, rank: int, callbacks: List[Any], epochs: int,
        lr: float = 0.05) -> Any:
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr))
    model.compile(optimizer=opt, loss="mse")
    x, y = data(rank)
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False,
                     verbose=0, callbacks=callbacks)


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def check_lrs(recorder: LrRecorder, want: Any) -> None:
        check(len(recorder.lrs) > 0, "no batch recorded")
        for (epoch, batch), got in sorted(recorder.lrs.items()):
            close(got, want(epoch, batch),
                  "lr at epoch %d batch %d" % (epoch, batch), rtol=1e-6)

    def schedule_constant_multiplier_decays() -> None:
        # Horovod: a constant multiplier m gives initial_lr * m ** (epoch -
        # start_epoch) from start_epoch on (m ** 0 = 1 at start_epoch).
        recorder = LrRecorder()
        fit(make_model(1), rank, [hvd.callbacks.LearningRateScheduleCallback(
            0.4, multiplier=0.5, start_epoch=1, end_epoch=3), recorder],
            epochs=4, lr=0.05)

        def want(epoch: int, batch: int) -> float:
            if epoch < 1:
                return 0.05  # the optimizer's own rate before start_epoch
            return 0.4 * 0.5 ** (min(epoch, 2) - 1)  # kept after end_epoch
        check_lrs(recorder, want)

    def schedule_constant_multiplier_smooth() -> None:
        recorder = LrRecorder()
        fit(make_model(1), rank, [hvd.callbacks.LearningRateScheduleCallback(
            0.4, multiplier=0.5, start_epoch=1, staircase=False), recorder],
            epochs=3, lr=0.05)

        def want(epoch: int, batch: int) -> float:
            if epoch < 1:
                return 0.05
            return 0.4 * 0.5 ** (epoch + batch / float(STEPS) - 1)
        check_lrs(recorder, want)

    def schedule_requires_initial_lr() -> None:
        expect_raises(lambda: hvd.callbacks.LearningRateScheduleCallback(
            None, 0.5), ValueError, "initial_lr")
        expect_raises(lambda: hvd.callbacks.LearningRateWarmupCallback(
            None), ValueError, "initial_lr")

    def schedule_steps_per_epoch_zero() -> None:
        # 0 means "not given": detected from fit's steps, as Horovod does.
        recorder = LrRecorder()
        fit(make_model(1), rank, [hvd.callbacks.LearningRateScheduleCallback(
            0.1, lambda e: 1.0 + e, staircase=False, steps_per_epoch=0),
            recorder], epochs=2)
        check_lrs(recorder, lambda e, b: 0.1 * (1.0 + e + b / float(STEPS)))

    def warmup_line_on_rank0_only() -> None:
        initial, warmup = 0.4, 2
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            fit(make_model(1), rank, [hvd.callbacks.LearningRateWarmupCallback(
                initial, warmup_epochs=warmup, verbose=1)], epochs=3, lr=0.01)
        lines = [line for line in out.getvalue().splitlines()
                 if "warmup" in line]
        if rank == 0:
            check(lines == ["Epoch %d: finished gradual learning rate warmup "
                            "to %g." % (warmup, initial)],
                  "rank 0 printed %r" % lines)
        else:
            check(lines == [], "rank %d printed %r" % (rank, lines))

    def broadcast_local_variables() -> None:
        model = make_model(seed=300 + rank)  # different weights per rank
        own = [np.array(w) for w in model.get_weights()]
        root = hbcore.broadcast_object(own, 0)
        local = model.layers[0].kernel  # one variable, not a list
        callback = hvd.callbacks.BroadcastGlobalVariablesCallback(
            0, local_variables=local)
        fit(model, rank, [callback], epochs=1, lr=0.0)  # lr 0: no updates
        after = model.get_weights()
        close(after[0], own[0], "the local kernel keeps this rank's value",
              rtol=0, atol=0)
        for i in range(1, len(after)):
            close(after[i], root[i], "weight %d is rank 0's" % i, rtol=0,
                  atol=0)
        # register_local_var on a list-built callback does the same.
        model = make_model(seed=400 + rank)
        own = [np.array(w) for w in model.get_weights()]
        root = hbcore.broadcast_object(own, 0)
        callback = hvd.callbacks.BroadcastGlobalVariablesCallback(
            0, local_variables=[model.layers[1].bias])
        callback.register_local_var(model.layers[0].bias)
        fit(model, rank, [callback], epochs=1, lr=0.0)
        after = model.get_weights()
        for i, keep_own in enumerate([False, True, False, True]):
            close(after[i], own[i] if keep_own else root[i],
                  "weight %d (%s)" % (i, "local" if keep_own else "global"),
                  rtol=0, atol=0)

    def broadcast_local_variables_checked() -> None:
        for bad in ([np.zeros(2)], ["kernel"], [None]):
            expect_raises(lambda: hvd.callbacks.BroadcastGlobalVariablesCallback(
                0, local_variables=bad), ValueError,
                "local variables must be of tf.Variable type")
        callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, "")
        expect_raises(lambda: callback.register_local_var(3.0), ValueError,
                      "tf.Variable")

    def best_model_checkpoint() -> None:
        callback = hvd.callbacks.BestModelCheckpoint(monitor="loss")
        check(callback.filepath is None, "filepath %r" % callback.filepath)
        check(callback.save_best_only is True, "save_best_only")
        check(callback.monitor == "loss", "monitor %r" % callback.monitor)
        check(isinstance(callback, keras.callbacks.ModelCheckpoint),
              "not a ModelCheckpoint")
        expect_raises(lambda: fit(make_model(1), rank, [callback], epochs=1),
                      ValueError, "filepath")
        out = os.environ.get("HB_TEST_OUT", "/tmp")
        callback = hvd.callbacks.BestModelCheckpoint(monitor="loss",
                                                     save_weights_only=True)
        callback.filepath = os.path.join(
            out, "best_rank%d_size%d.weights.h5" % (rank, size))
        if os.path.exists(callback.filepath):
            os.remove(callback.filepath)
        model = make_model(1)

        class Losses(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.losses: List[float] = []
                self.weights: List[Any] = []

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                self.losses.append(float(logs["loss"]))
                self.weights.append([np.array(w) for w in
                                     self.model.get_weights()])
        losses = Losses()
        fit(model, rank, [losses, callback], epochs=3, lr=0.05)
        check(os.path.exists(callback.filepath), "no checkpoint written")
        best = int(np.argmin(losses.losses))
        restored = make_model(2)
        restored.load_weights(callback.filepath)
        for got, want in zip(restored.get_weights(), losses.weights[best]):
            close(got, want, "checkpoint holds the best epoch's weights",
                  rtol=0, atol=0)

    def keras_reducescatter_and_names() -> None:
        rows = 2 * size + 1
        value = rank_values(800, rank, (rows, 3))
        everyone = [rank_values(800, r, (rows, 3)) for r in range(size)]
        start = sum(rows // size + (1 if r < rows % size else 0)
                    for r in range(rank))
        count = rows // size + (1 if rank < rows % size else 0)
        got = hvd.reducescatter(value, name="keras_parity_rs")
        close(got, np.mean(everyone, axis=0)[start:start + count],
              "reducescatter (Average)")
        got = hvd.reducescatter(value, name="keras_parity_rs_sum", op=hvd.Sum)
        close(got, np.sum(everyone, axis=0)[start:start + count],
              "reducescatter (Sum)")
        for name in ("ProcessSet", "global_process_set", "add_process_set",
                     "remove_process_set", "mpi_enabled", "gloo_enabled",
                     "gloo_built", "ddl_built", "ccl_built", "cuda_built",
                     "rocm_built"):
            check(hasattr(hvd, name), "hbcore_tf.keras has no %s" % name)
            check(name in hvd.__all__, "%s not in __all__" % name)
        check(hvd.global_process_set.size() == size, "global_process_set")

    def optimizer_groups_arguments() -> None:
        # Horovod's Keras DistributedOptimizer: num_groups is deprecated
        # (DeprecationWarning), an integer groups must be > 0 (ValueError).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                           num_groups=2)
        check(any(issubclass(w.category, DeprecationWarning)
                  and "num_groups" in str(w.message) for w in caught),
              "no DeprecationWarning for num_groups: %r" % [
                  str(w.message) for w in caught])
        check(hasattr(opt, "_hb_runtime"), "not distributed")
        for bad in (0, -1):
            expect_raises(lambda: hvd.DistributedOptimizer(
                keras.optimizers.SGD(0.1), groups=bad), ValueError, "groups")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=2)
        check(not any(issubclass(w.category, DeprecationWarning)
                      for w in caught), "groups=2 warned")

    table = {
        "schedule_constant_multiplier_decays":
            schedule_constant_multiplier_decays,
        "schedule_constant_multiplier_smooth":
            schedule_constant_multiplier_smooth,
        "schedule_requires_initial_lr": schedule_requires_initial_lr,
        "schedule_steps_per_epoch_zero": schedule_steps_per_epoch_zero,
        "warmup_line_on_rank0_only": warmup_line_on_rank0_only,
        "broadcast_local_variables": broadcast_local_variables,
        "broadcast_local_variables_checked":
            broadcast_local_variables_checked,
        "best_model_checkpoint": best_model_checkpoint,
        "keras_reducescatter_and_names": keras_reducescatter_and_names,
        "optimizer_groups_arguments": optimizer_groups_arguments,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
