"""BroadcastGlobalVariablesCallback with weights that do not exist (or
differ across ranks) when training begins, with Keras 3 by default or
tf_keras when TF_USE_LEGACY_KERAS=1. Run by tests/tf/test_keras_broadcast.py
at 2 and 3 ranks.

Every rank initialises its weights from rank-seeded numpy data, so the
expected values (the root's initial weights) are computed here with numpy,
never read from hbcore. The learning rate is 0, so after the first batch
every rank must hold exactly the root's initial weights.

Cases:
- lazy_sequential_root0 / lazy_sequential_rootlast: a Sequential without
  an input shape (Horovod's Keras MNIST example): the weights are created
  by the first train step, so the broadcast can only happen at its end;
- optimizer_built_on_root_only: the model is built, but only the root's
  optimizer has its slot variables when training begins (as after a
  restore on the root only); the ranks must agree to wait for the first
  batch instead of submitting different broadcasts.
"""
from typing import Any, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from train_common import run_table  # noqa: E402
from train_common import Checker, check, close, rank_values, report

import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()

CASES = ["lazy_sequential_root0", "lazy_sequential_rootlast",
         "optimizer_built_on_root_only"]
FEATURES, HIDDEN = 4, 3
# (kernel, bias) shapes of the two Dense layers, in model.weights order.
SHAPES = [(FEATURES, HIDDEN), (HIDDEN,), (HIDDEN, 1), (1,)]
BATCH, STEPS = 4, 3


def initial_weights(seed: int, rank: int) -> List[np.ndarray]:
    """Rank ``rank``'s initial weights (any rank can compute them)."""
    return [rank_values(seed + i, rank, shape)
            for i, shape in enumerate(SHAPES)]


def _initializer(value: np.ndarray) -> Any:
    def init(shape: Sequence[int], dtype: Any = None, **_: Any) -> Any:
        check(tuple(shape) == value.shape, "initializer shape %s vs %s" % (
            tuple(shape), value.shape))
        return tf.constant(value)
    return init


def make_model(seed: int, rank: int, input_shape: bool) -> Any:
    values = initial_weights(seed, rank)
    layers = [keras.layers.Dense(HIDDEN, activation="tanh",
                                 kernel_initializer=_initializer(values[0]),
                                 bias_initializer=_initializer(values[1])),
              keras.layers.Dense(1,
                                 kernel_initializer=_initializer(values[2]),
                                 bias_initializer=_initializer(values[3]))]
    if input_shape:
        layers.insert(0, keras.Input((FEATURES,)))
    return keras.Sequential(layers)


def weights_of(model: Any) -> List[np.ndarray]:
    return [np.array(w) for w in model.get_weights()]


class FirstBatchRecorder(keras.callbacks.Callback):
    """Records the weights at the end of the first batch (placed after the
    broadcast callback, so it sees what that left behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.after_batch0 = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch == 0:
            self.after_batch0 = weights_of(self.model)


def fit(model: Any, rank: int, root: int, optimizer: Any = None
        ) -> Tuple[FirstBatchRecorder, Any]:
    optimizer = optimizer or hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.0))
    model.compile(optimizer=optimizer, loss="mse")
    x = rank_values(900, rank, (BATCH * STEPS, FEATURES))
    y = x.sum(axis=1, keepdims=True)
    recorder = FirstBatchRecorder()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(root),
                         recorder])
    return recorder, model


def check_root_weights(recorder: FirstBatchRecorder, model: Any, seed: int,
                       root: int, rank: int) -> None:
    expected = initial_weights(seed, root)
    mine = initial_weights(seed, rank)
    if rank != root:  # the case must start from different weights
        check(not np.allclose(mine[0], expected[0]),
              "rank-dependent initial weights")
    check(recorder.after_batch0 is not None, "no first batch recorded")
    check(len(recorder.after_batch0) == len(SHAPES),
          "%d weights" % len(recorder.after_batch0))
    for i, (got, want) in enumerate(zip(recorder.after_batch0, expected)):
        close(got, want, "weight %d after batch 0 vs rank %d's initial"
              % (i, root))
    for i, (got, want) in enumerate(zip(weights_of(model), expected)):
        close(got, want, "weight %d after training (lr 0)" % i)


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def lazy_sequential(seed: int, root: int) -> None:
        model = make_model(seed, rank, input_shape=False)
        check(not model.built, "the model must be built by its first call")
        recorder, model = fit(model, rank, root)
        check_root_weights(recorder, model, seed, root, rank)

    def optimizer_built_on_root_only() -> None:
        seed, root = 300, size - 1
        model = make_model(seed, rank, input_shape=True)
        optimizer = hvd.DistributedOptimizer(
            keras.optimizers.SGD(0.0, momentum=0.9))
        if rank == root:  # slots exist on the root only
            optimizer.build(model.trainable_variables)
        recorder, model = fit(model, rank, root, optimizer)
        check_root_weights(recorder, model, seed, root, rank)

    table = {
        "lazy_sequential_root0": lambda: lazy_sequential(100, 0),
        "lazy_sequential_rootlast": lambda: lazy_sequential(200, size - 1),
        "optimizer_built_on_root_only": optimizer_built_on_root_only,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
