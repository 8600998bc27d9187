"""Rank script: autotune under hbcore_tf (tests/tf/test_autotune_tf.py).

    hbrun -np N python autotune_tf.py STEPS [PROPOSALS]

A small Keras model trains for at least STEPS steps, and on until the job
has applied PROPOSALS autotune proposals (common.train_while_tuning), of SGD through
DistributedGradientTape in a tf.function, with autotune on (the launch's
HB_AUTOTUNE_* variables); each step also allreduces a rank-seeded tensor
through hbcore_tf, checked against numpy. Reports the parameters this rank
applied per cycle, whether rank 0's tuner converged, and the weights'
checksum (equal on every rank when every step averaged the same
gradients).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "rank_scripts"))
from common import rank_data, report, train_while_tuning  # noqa: E402

import tensorflow as tf  # noqa: E402

import hbcore_tf as hvd  # noqa: E402
from hbcore._native import core  # noqa: E402
from hbcore.autotune import runner  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1])
    proposals = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    keras = tf.keras
    model = keras.Sequential([keras.Input((8,)),
                              keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    hvd.broadcast_variables(model.variables, root_rank=0)
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(rank)
    x = tf.constant(rng.normal(size=(16, 8)).astype(np.float32))
    y = tf.constant(rng.normal(size=(16, 1)).astype(np.float32))

    @tf.function
    def train() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    expected = sum(rank_data(7, r, [300], "float32").astype(np.float64)
                   for r in range(size))

    def step(_: int) -> bool:
        train()
        got = hvd.allreduce(tf.constant(rank_data(7, rank, [300], "float32")),
                            op=hvd.Sum, name="check")
        return bool(np.allclose(got.numpy(), expected, rtol=1e-5))

    def stop_flag(done: bool) -> bool:
        flag = hvd.broadcast(tf.constant([int(done)], tf.int32), 0,
                             name="tuning.stop")
        return bool(flag.numpy()[0])

    ok = train_while_tuning(step, steps, proposals, stop_flag)
    checksum = float(sum(float(tf.reduce_sum(v))
                         for v in model.trainable_variables))
    # After shutdown the record of applied parameters is complete on every
    # rank (tests/rank_scripts/autotune.py says why).
    hvd.shutdown()
    report({"rank": rank, "results_ok": bool(ok),
            "converged": runner.status()["converged"],
            "history": [[c, p] for c, p in core.autotune_history()],
            "checksum": checksum})


if __name__ == "__main__":
    main()
