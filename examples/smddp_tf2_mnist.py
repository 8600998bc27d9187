"""SageMaker distributed data parallel's TensorFlow 2 example (the script of
its guide, "Modify a TensorFlow 2.x training script"), with only the import
changed, on MNIST-shaped data generated here.

    hbrun -np 2 python examples/smddp_tf2_mnist.py
    hbrun -np 2 python examples/smddp_tf2_mnist.py --steps 200

The lines that differ from the guide: the import (hbcore_tf.smddp in place
of smdistributed.dataparallel.tensorflow), the generated dataset in place
of the downloaded MNIST, the learning rate (0.001 x size; the guide's
0.000125 x size is tuned for its 8-node job), the step count and
checkpoint directory as arguments, and the check at the end that every rank holds the same weights.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

import hbcore_tf.smddp as sdp    # was: import smdistributed.dataparallel.tensorflow as sdp

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--checkpoint-dir", default=None)
args = parser.parse_args()

sdp.init()

gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[sdp.local_rank()], "GPU")

# MNIST-shaped data: 28x28 images of 10 classes (each class a noisy
# template), different samples on every rank.
templates = np.random.default_rng(0).uniform(size=(10, 28, 28))
rng = np.random.default_rng(1000 + sdp.rank())
labels = rng.integers(0, 10, size=args.batch_size * 16)
images = np.clip(templates[labels] + rng.normal(0, 0.3, templates[labels].shape),
                 0, 1).astype(np.float32)
dataset = tf.data.Dataset.from_tensor_slices(
    (images[..., None], labels.astype(np.int64)))
dataset = dataset.repeat().shuffle(1000).batch(args.batch_size)

mnist_model = tf.keras.Sequential([
    tf.keras.Input(shape=(28, 28, 1)),
    tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(64, activation="relu"),
    tf.keras.layers.Dense(10, activation="softmax"),
])
loss = tf.losses.SparseCategoricalCrossentropy()

# Scale the learning rate by the number of workers.
opt = tf.optimizers.Adam(0.001 * sdp.size())

checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="smddp_")
checkpoint = tf.train.Checkpoint(model=mnist_model, optimizer=opt)


@tf.function
def training_step(images, labels, first_batch):
    with tf.GradientTape() as tape:
        probs = mnist_model(images, training=True)
        loss_value = loss(labels, probs)

    # Wrap tf.GradientTape with the library's DistributedGradientTape
    tape = sdp.DistributedGradientTape(tape)

    grads = tape.gradient(loss_value, mnist_model.trainable_variables)
    opt.apply_gradients(zip(grads, mnist_model.trainable_variables))

    if first_batch:
        # Broadcast model and optimizer variables
        sdp.broadcast_variables(mnist_model.variables, root_rank=0)
        sdp.broadcast_variables(opt.variables(), root_rank=0)

    return loss_value


for batch, (images, labels) in enumerate(dataset.take(args.steps)):
    loss_value = training_step(images, labels, batch == 0)
    if batch % 20 == 0 and sdp.rank() == 0:
        print("Step #%d\tLoss: %.6f" % (batch, loss_value))

# Save checkpoints only from the leader node.
if sdp.rank() == 0:
    checkpoint.save(os.path.join(checkpoint_dir, "ckpt"))

# Not in the guide: every rank must hold the same weights.
total = tf.add_n([tf.reduce_sum(v) for v in mnist_model.variables])
smallest = sdp.allreduce(total, 0, 1, op=sdp.ReduceOp.MIN)
largest = sdp.allreduce(total, 0, 1, op=sdp.ReduceOp.MAX)
if float(smallest) != float(largest):
    sys.exit("rank %d: weights differ between ranks" % sdp.rank())
if sdp.rank() == 0:
    print("final loss %.4f; weights identical on all ranks" % loss_value)
sdp.shutdown()
