"""tf_keras ``model.fit`` in a tf.compat.v1 graph (eager execution
disabled, as in TF1-era Keras scripts) with DistributedOptimizer,
BroadcastGlobalVariablesCallback and MetricAverageCallback. Run by
tests/tf/test_keras_graph_mode.py at 2 and 3 ranks with
TF_USE_LEGACY_KERAS=1.

Every rank fits on its own rank-seeded data. A recorder placed before
MetricAverageCallback keeps each rank's own epoch logs; the expected
averages are their numpy mean over ranks (gathered through hbcore's numpy
API, not through the callback).

Cases:
- fit_in_a_v1_graph: the fit finishes; every epoch's averaged loss and
  metric equal the numpy mean of the ranks' own values; all ranks end
  with the same weights (broadcast at the start, averaged gradients).
- lr_warmup_in_a_v1_graph: LearningRateWarmupCallback with a momentum
  SGD sets Horovod's rate at every batch (read back in Keras' session),
  scales the momentum buffers by new/old rate at each change, and logs
  the final rate.
- lr_schedule_in_a_v1_graph: LearningRateScheduleCallback (staircase,
  constant multiplier: initial_lr * m ** (epoch - start_epoch)).
- keras_ops_in_a_v1_graph: hvd.allreduce / allgather / broadcast /
  reducescatter return values (numpy arrays computed in Keras' session),
  as Horovod's Keras helpers do in graph mode.
"""
import os
from typing import Any, Dict, List

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()

from train_common import run_table  # noqa: E402
from train_common import Checker, check, close, rank_values, report  # noqa: E402

import hbcore  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
CASES = ["fit_in_a_v1_graph", "lr_warmup_in_a_v1_graph",
         "lr_schedule_in_a_v1_graph", "keras_ops_in_a_v1_graph"]
EPOCHS = 3
STEPS = 3  # batches per epoch of the learning-rate cases


class LrRecorder(keras.callbacks.Callback):
    """The rate and the momentum buffers at every batch's begin (after the
    callbacks before it) and end, read in Keras' session."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0
        self.lrs: Dict[tuple, float] = {}
        self.begin: Dict[tuple, List[np.ndarray]] = {}
        self.end: Dict[tuple, List[np.ndarray]] = {}

    def _buffers(self) -> List[np.ndarray]:
        slots = [w for w in self.model.optimizer.weights
                 if w.name.split(":")[0].endswith("/momentum")]
        return [np.array(v) for v in keras.backend.batch_get_value(slots)]

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        key = (self.epoch, batch)
        self.lrs[key] = float(keras.backend.get_value(
            self.model.optimizer.lr))
        self.begin[key] = self._buffers()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.end[(self.epoch, batch)] = self._buffers()


class Recorder(keras.callbacks.Callback):
    """Copies each epoch's logs before later callbacks change them."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: List[Dict[str, float]] = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epochs.append({k: float(v) for k, v in (logs or {}).items()})


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def fit_in_a_v1_graph() -> None:
        check(not tf.executing_eagerly(), "eager execution must be off")
        check(keras.__name__ == "tf_keras", "needs TF_USE_LEGACY_KERAS=1")
        tf.compat.v1.set_random_seed(rank)  # different initial weights
        model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(hvd.DistributedOptimizer(
            keras.optimizers.legacy.SGD(0.05)), loss="mse", metrics=["mae"])
        x = rank_values(10, rank, (24, 3))
        y = rank_values(20, rank, (24, 1))
        recorder = Recorder()
        history = model.fit(
            x, y, batch_size=8, epochs=EPOCHS, shuffle=False, verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                       recorder, hvd.callbacks.MetricAverageCallback()])
        own = hbcore.allgather_object(recorder.epochs)
        for key in ("loss", "mae"):
            expected = [np.mean([own[r][e][key] for r in range(size)])
                        for e in range(EPOCHS)]
            close(history.history[key], expected,
                  "averaged %s per epoch" % key)
        weights = hbcore.allgather_object(
            [w.tolist() for w in model.get_weights()])
        for r in range(1, size):
            for a, b in zip(weights[0], weights[r]):
                close(np.array(b), np.array(a),
                      "rank %d's weights against rank 0's" % r, rtol=0,
                      atol=0)

    def lr_fit(callback: Any, momentum: float, epochs: int) -> Any:
        tf.compat.v1.set_random_seed(1)
        model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(
            0.01, momentum=momentum)), loss="mse")
        x = rank_values(30, rank, (8 * STEPS, 3))
        y = x.sum(axis=1, keepdims=True)
        recorder = LrRecorder()
        history = model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False,
                            verbose=0, callbacks=[callback, recorder])
        return recorder, history

    def lr_warmup_in_a_v1_graph() -> None:
        initial, warmup = 0.4, 2
        recorder, history = lr_fit(hvd.callbacks.LearningRateWarmupCallback(
            initial, warmup_epochs=warmup), momentum=0.9, epochs=3)
        keys = sorted(recorder.lrs)
        check(len(keys) == 3 * STEPS, "recorded %d batches" % len(keys))
        for epoch, batch in keys:
            if epoch < warmup:
                e = epoch + (batch + 1.0) / STEPS
                want = initial / size * (e * (size - 1) / warmup + 1)
            else:
                want = initial
            close(recorder.lrs[(epoch, batch)], want,
                  "lr at epoch %d batch %d" % (epoch, batch), rtol=1e-6)
        close(history.history["lr"][-1], initial, "logged lr", rtol=1e-6)
        for prev, key in zip(keys, keys[1:]):
            ratio = recorder.lrs[key] / recorder.lrs[prev]
            check(len(recorder.begin[key]) == 4,
                  "found %d momentum buffers" % len(recorder.begin[key]))
            for before, after in zip(recorder.end[prev], recorder.begin[key]):
                close(after, before * ratio,
                      "buffer at %s (lr ratio %g)" % (key, ratio),
                      rtol=1e-5, atol=1e-7)

    def lr_schedule_in_a_v1_graph() -> None:
        recorder, history = lr_fit(
            hvd.callbacks.LearningRateScheduleCallback(
                0.2, multiplier=0.5, start_epoch=1, momentum_correction=False),
            momentum=0.0, epochs=3)
        for (epoch, batch), got in sorted(recorder.lrs.items()):
            want = 0.01 if epoch < 1 else 0.2 * 0.5 ** (epoch - 1)
            close(got, want, "lr at epoch %d batch %d" % (epoch, batch),
                  rtol=1e-6)
        close(history.history["lr"], [0.01, 0.2, 0.1], "logged lr",
              rtol=1e-6)

    def keras_ops_in_a_v1_graph() -> None:
        everyone = [rank_values(40, r, (2 * size + 1, 2)) for r in range(size)]
        mine = everyone[rank]
        got = hvd.allreduce(mine, name="graph_keras_allreduce")
        check(isinstance(got, np.ndarray), "allreduce gave %r" % type(got))
        close(got, np.mean(everyone, axis=0), "allreduce")
        got = hvd.allgather(mine[:rank + 1], name="graph_keras_allgather")
        check(isinstance(got, np.ndarray), "allgather gave %r" % type(got))
        close(got, np.concatenate([e[:r + 1] for r, e in enumerate(everyone)]),
              "allgather")
        got = hvd.broadcast(mine, size - 1, name="graph_keras_broadcast")
        check(isinstance(got, np.ndarray), "broadcast gave %r" % type(got))
        close(got, everyone[size - 1], "broadcast")
        got = hvd.reducescatter(mine, name="graph_keras_reducescatter",
                                op=hvd.Sum)
        check(isinstance(got, np.ndarray), "reducescatter gave %r" % type(got))
        rows = 2 * size + 1
        start = sum(rows // size + (1 if r < rows % size else 0)
                    for r in range(rank))
        count = rows // size + (1 if rank < rows % size else 0)
        close(got, np.sum(everyone, axis=0)[start:start + count],
              "reducescatter")

    run_table(checker, {"fit_in_a_v1_graph": fit_in_a_v1_graph,
                        "lr_warmup_in_a_v1_graph": lr_warmup_in_a_v1_graph,
                        "lr_schedule_in_a_v1_graph": lr_schedule_in_a_v1_graph,
                        "keras_ops_in_a_v1_graph": keras_ops_in_a_v1_graph},
              CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
