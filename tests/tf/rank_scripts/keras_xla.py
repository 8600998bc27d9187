"""Keras 3 models compiled with hbcore's DistributedOptimizer do not use
XLA (hbcore's collectives have no XLA kernel), so a Horovod script's
model.compile(optimizer=hvd.DistributedOptimizer(...)) trains as written
(hbcore_tf/_parallel/keras_xla.py). Run by tests/tf/test_keras_xla.py.

- explicit_true_falls_back: compile(jit_compile=True) warns as Keras does
  for an unsupported model, sets model.jit_compile False and trains: the
  weights after one SGD step equal numpy's step on the ranks' mean
  gradient (it failed at the first step with hbcore's XLA error);
- supports_jit_answers: Keras' model_supports_jit is False for a model
  whose optimizer is hbcore's (also under a LossScaleOptimizer, as
  mixed_float16 wraps it), True for the same model with a plain optimizer
  (what jit_compile="auto" asks on a GPU host);
- ops_under_xla_refused: every hbcore op traced in a
  tf.function(jit_compile=True) raises the ValueError that names the op
  and says why (it was TF's InvalidArgumentError naming an op kernel at
  the first call), on every rank, and submits nothing: an allreduce right
  after completes.
"""
import warnings

import numpy as np

from train_common import (Checker, check, close, expect_raises, rank_values,
                          report, run_table)
from train_common import tf  # noqa: F401  (TensorFlow before Keras)

import keras  # noqa: E402

import hbcore_tf as hvd  # noqa: E402

CASES = ["explicit_true_falls_back", "supports_jit_answers",
         "ops_under_xla_refused"]
IN, OUT, ROWS = 4, 2, 6


def dense_model() -> "keras.Model":
    model = keras.Sequential([keras.Input((IN,)),
                              keras.layers.Dense(OUT, use_bias=False)])
    model.layers[0].kernel.assign(np.ones((IN, OUT), np.float32) * 0.1)
    return model


def explicit_true_falls_back() -> None:
    rank, size = hvd.rank(), hvd.size()
    lr = 0.5
    model = dense_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.compile(optimizer=hvd.DistributedOptimizer(
            keras.optimizers.SGD(lr)), loss="mse", jit_compile=True)
    check(model.jit_compile is False, "model.jit_compile is %r"
          % (model.jit_compile,))
    check(any("jit_compile" in str(w.message) for w in caught),
          "no warning about jit_compile: %r" % [str(w.message)
                                               for w in caught])
    xs = [rank_values(5, r, (ROWS, IN)) for r in range(size)]
    ys = [rank_values(6, r, (ROWS, OUT)) for r in range(size)]
    model.fit(xs[rank], ys[rank], batch_size=ROWS, epochs=1, shuffle=False,
              verbose=0)
    w0 = np.ones((IN, OUT)) * 0.1
    grads = []
    for x, y in zip(xs, ys):  # d mean((xw - y)^2) / dw, per rank
        x, y = x.astype(np.float64), y.astype(np.float64)
        grads.append(2.0 * x.T @ (x @ w0 - y) / (ROWS * OUT))
    close(model.layers[0].kernel, w0 - lr * np.mean(grads, axis=0),
          "kernel after one step", rtol=1e-4, atol=1e-5)


def supports_jit_answers() -> None:
    from keras.src.trainers import trainer

    distributed = dense_model()
    distributed.compile(optimizer=hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.1)), loss="mse")
    check(trainer.model_supports_jit(distributed) is False,
          "a model with hbcore's optimizer claims XLA support")
    scaled = dense_model()
    scaled.compile(optimizer=keras.optimizers.LossScaleOptimizer(
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))), loss="mse")
    check(trainer.model_supports_jit(scaled) is False,
          "a LossScaleOptimizer around hbcore's optimizer claims XLA")
    plain = dense_model()
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    check(trainer.model_supports_jit(plain) is True,
          "a plain model lost XLA support")


def ops_under_xla_refused() -> None:
    x = tf.ones([4], tf.float32)
    ops = {
        "HbcoreAllreduce": lambda: hvd.allreduce(x),
        "HbcoreGroupedAllreduce": lambda: hvd.grouped_allreduce([x, x]),
        "HbcoreAllgather": lambda: hvd.allgather(x),
        "HbcoreBroadcast": lambda: hvd.broadcast(x, 0),
        "HbcoreReducescatter": lambda: hvd.reducescatter(x),
        "HbcoreAlltoall": lambda: hvd.alltoall(x),
        "HbcoreBarrier": lambda: hvd.barrier(),
        "HbcoreJoin": lambda: hvd.join(),
    }
    for op_name, op in ops.items():
        exc = expect_raises(tf.function(op, jit_compile=True), ValueError,
                            "cannot run inside an XLA-compiled function")
        check(op_name in str(exc),
              "the error does not name %s: %s" % (op_name, exc))
    out = hvd.allreduce(tf.constant([float(hvd.rank())]), op=hvd.Sum,
                        name="after_xla")
    close(out, [sum(range(hvd.size()))], "allreduce after the refusals")


def main() -> None:
    hvd.init()
    checker = Checker(hvd.rank())
    table = {"explicit_true_falls_back": explicit_true_falls_back,
             "supports_jit_answers": supports_jit_answers,
             "ops_under_xla_refused": ops_under_xla_refused}
    run_table(checker, table, CASES)
    report({"rank": hvd.rank(), "size": hvd.size(), "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
