"""A custom TF2 training loop with DistributedGradientTape (in the style of
Horovod's tensorflow2_mnist.py), on data generated here.

    hbrun -np 2 python examples/tf2_gradient_tape.py
    hbrun -np 2 python examples/tf2_gradient_tape.py --steps 20

The step runs in a tf.function; DistributedGradientTape averages all of a
step's gradients over the ranks in one fused allreduce. After the first
step (when the optimizer's slots exist) rank 0's model and optimizer
variables are broadcast, so all ranks continue from the same state. At the
end every rank checks that its weights equal rank 0's.
"""
import argparse
import os
import sys

import numpy as np
import tensorflow as tf
import keras

import hbcore_tf as hvd


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100,
                        help="total steps, divided among the ranks")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.001,
                        help="single-rank learning rate (scaled by size)")
    return parser.parse_args()


def dataset(rank: int, batch_size: int) -> tf.data.Dataset:
    """Endless batches of a 20-feature, 4-class problem; the same rule on
    every rank, different samples per rank."""
    w = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    rng = np.random.default_rng(500 + rank)
    x = rng.normal(size=(4096, 20)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int64)
    return (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
            .shuffle(1024, seed=rank).batch(batch_size))


def main() -> int:
    args = parse_args()
    hvd.init()
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(hvd.rank())  # rank 0's init is broadcast

    model = keras.Sequential([keras.Input((20,)),
                              keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(4)])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(args.lr * hvd.size())

    @tf.function
    def training_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # Broadcast after the first gradient step, so that the optimizer's
        # slot variables exist and are broadcast too.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    steps = max(1, args.steps // hvd.size())
    for step, (x, y) in enumerate(dataset(hvd.rank(), args.batch_size)
                                  .take(steps)):
        loss = training_step(x, y, step == 0)
        if step % 10 == 0 and hvd.rank() == 0:
            print("step %d: loss %.4f" % (step, loss.numpy()))

    weights = model.get_weights()
    for rank, theirs in enumerate(hvd.allgather_object(weights)):
        if not all(np.array_equal(a, b) for a, b in zip(weights, theirs)):
            print("rank %d: weights differ from rank %d" % (hvd.rank(), rank),
                  file=sys.stderr)
            return 1
    if hvd.rank() == 0:
        print("done: %d steps on %d ranks, final loss %.4f; weights identical "
              "on all ranks" % (steps, hvd.size(), loss.numpy()))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
