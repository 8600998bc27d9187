"""Keras 3 model.fit on MNIST-shaped data with hbcore (in the style of
Horovod's tensorflow2_keras_mnist.py), on data generated here (no download).

    hbrun -np 2 python examples/keras_mnist_style.py
    hbrun -np 2 python examples/keras_mnist_style.py --epochs 1 --steps-per-epoch 5

Each rank trains on its own shard; DistributedOptimizer averages the
gradients of every step in one fused allreduce; the callbacks broadcast
rank 0's initial state, average the epoch metrics over ranks and warm the
learning rate up to lr * size. Only rank 0 writes checkpoints and prints.
At the end every rank checks that its weights are identical to rank 0's.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
import keras

import hbcore_tf.keras as hvd


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.02,
                        help="single-rank learning rate (scaled by size)")
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--checkpoint-dir", default=None,
                        help="where rank 0 saves checkpoints (default: a "
                             "temporary directory)")
    return parser.parse_args()


def generated_mnist(rank: int, samples: int):
    """28x28 'digits': a fixed random template per class plus noise; the
    same templates on every rank, different samples per rank."""
    templates = np.random.default_rng(0).uniform(0, 1, (10, 28, 28, 1))
    rng = np.random.default_rng(1000 + rank)
    labels = rng.integers(0, 10, samples)
    images = templates[labels] + rng.normal(0, 0.5, (samples, 28, 28, 1))
    return images.astype(np.float32), labels.astype(np.int64)


def build_model() -> keras.Model:
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main() -> int:
    args = parse_args()
    hvd.init()
    # CPU training: share the cores among the ranks of this host.
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(hvd.rank())  # rank 0's init is broadcast

    x, y = generated_mnist(hvd.rank(), args.steps_per_epoch * args.batch_size)
    model = build_model()
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr,
                                                        momentum=0.9))
    model.compile(optimizer=opt, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(
                      from_logits=True))

    callbacks = [
        # rank 0's initial weights everywhere (put it first).
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # loss/accuracy averaged over ranks before anything logs them.
        hvd.callbacks.MetricAverageCallback(),
        # lr ramps from lr to lr * size over the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs,
            verbose=1 if hvd.rank() == 0 else 0),
    ]
    if hvd.rank() == 0:
        directory = args.checkpoint_dir or tempfile.mkdtemp(prefix="ckpt_")
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(directory, "checkpoint-{epoch}.weights.h5"),
            save_weights_only=True))

    history = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
                        callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)

    weights = model.get_weights()
    everyone = hvd.allgather_object(weights)
    for rank, theirs in enumerate(everyone):
        for mine, other in zip(weights, theirs):
            if not np.array_equal(mine, other):
                print("rank %d: weights differ from rank %d" % (
                    hvd.rank(), rank), file=sys.stderr)
                return 1
    if hvd.rank() == 0:
        print("final loss %.4f, accuracy %.3f (averaged over %d ranks); "
              "weights identical on all ranks" % (
                  history.history["loss"][-1],
                  history.history["accuracy"][-1], hvd.size()))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
