"""Synthetic-data training throughput with hbcore (in the style of
Horovod's tensorflow2_synthetic_benchmark.py). No downloads: the Keras
application models are built with weights=None, the data is random.

    hbrun -np 2 python examples/tf2_synthetic_benchmark.py
    hbrun -np 2 python examples/tf2_synthetic_benchmark.py --model MobileNetV2 \\
        --image-size 32 --batch-size 8 --num-iters 3

Prints img/sec per rank (mean +- 1.96 std over iterations) and the total.
"""
import argparse
import os
import sys
import timeit

import numpy as np
import tensorflow as tf
import keras

import hbcore_tf as hvd

MODELS = ["ResNet50", "MobileNetV2", "small_cnn", "mlp"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="TensorFlow 2 synthetic benchmark with hbcore",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="ResNet50", choices=MODELS,
                        help="keras.applications model (weights=None) or a "
                             "small built-in one")
    parser.add_argument("--image-size", type=int, default=64,
                        help="input images are size x size x 3 (>= 32)")
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per-rank batch size")
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="send gradients as float16")
    parser.add_argument("--eager", action="store_true",
                        help="run the step eagerly instead of in tf.function")
    parser.add_argument("--intra-op-threads", type=int, default=0,
                        help="TF intra-op threads per rank (0: cores / "
                             "ranks on this host)")
    return parser.parse_args()


def build_model(name: str, image_size: int, num_classes: int) -> keras.Model:
    shape = (image_size, image_size, 3)
    if name in ("ResNet50", "MobileNetV2"):
        return getattr(keras.applications, name)(
            weights=None, input_shape=shape, classes=num_classes,
            classifier_activation=None)
    if name == "small_cnn":
        return keras.Sequential([
            keras.Input(shape),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes)])
    layers = [keras.Input(shape), keras.layers.Flatten()]
    layers += [keras.layers.Dense(256, activation="relu") for _ in range(8)]
    return keras.Sequential(layers + [keras.layers.Dense(num_classes)])


def main() -> int:
    args = parse_args()
    hvd.init()
    threads = args.intra_op_threads or max(
        1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    model = build_model(args.model, args.image_size, args.num_classes)
    opt = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = (hvd.Compression.fp16 if args.fp16_allreduce
                   else hvd.Compression.none)

    rng = np.random.default_rng(hvd.rank())
    data = tf.constant(rng.uniform(size=(args.batch_size, args.image_size,
                                         args.image_size, 3)), tf.float32)
    target = tf.constant(rng.integers(0, args.num_classes, args.batch_size))

    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            logits = model(data, training=True)
            loss = loss_fn(target, logits)
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

    step = benchmark_step if args.eager else tf.function(benchmark_step)

    def log(text: str) -> None:
        if hvd.rank() == 0:
            print(text, flush=True)

    log("Model: %s (%d trainable variables)" % (
        args.model, len(model.trainable_variables)))
    log("Image size: %d, batch size: %d per rank" % (args.image_size,
                                                     args.batch_size))
    log("Number of ranks: %d, intra-op threads per rank: %d" % (
        hvd.size(), threads))

    step(True)
    log("Running warmup...")
    timeit.timeit(lambda: step(False), number=args.num_warmup_batches)

    log("Running benchmark...")
    rates = []
    for i in range(args.num_iters):
        seconds = timeit.timeit(lambda: step(False),
                                number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / seconds
        log("Iter #%d: %.1f img/sec per rank" % (i, rate))
        rates.append(rate)

    mean, conf = np.mean(rates), 1.96 * np.std(rates)
    everyone = hvd.allgather_object(float(mean))
    for rank, rank_rate in enumerate(everyone):
        log("Rank %d: %.1f img/sec" % (rank, rank_rate))
    log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (
        hvd.size(), hvd.size() * mean, hvd.size() * conf))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
