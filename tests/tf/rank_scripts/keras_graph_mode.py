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
from hbcore_tf import _compat  # noqa: E402

keras = _compat.keras_module()
CASES = ["fit_in_a_v1_graph"]
EPOCHS = 3


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

    run_table(checker, {"fit_in_a_v1_graph": fit_in_a_v1_graph}, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
