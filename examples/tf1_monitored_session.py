"""A tf.compat.v1 graph trained with MonitoredTrainingSession (in the style
of Horovod's tensorflow_mnist.py), on data generated here.

    hbrun -np 2 python examples/tf1_monitored_session.py
    hbrun -np 2 python examples/tf1_monitored_session.py --steps 40

- DistributedOptimizer averages the gradients over the ranks (one fused
  allreduce per step) and applies them with the wrapped MomentumOptimizer.
- BroadcastGlobalVariablesHook(0) copies rank 0's initial variables to
  every rank when the session starts.
- Only rank 0 gets a checkpoint_dir, so only rank 0 writes checkpoints.
- StopAtStepHook stops every rank at the same global step.
At the end every rank checks that its weights equal rank 0's, and rank 0
that its checkpoint exists.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

import hbcore_tf as hvd

v1 = tf.compat.v1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200,
                        help="total steps, divided among the ranks")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.01,
                        help="single-rank learning rate (scaled by size)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="rank 0's checkpoint directory (default: a "
                             "temporary directory)")
    return parser.parse_args()


def batches(rank: int, batch_size: int):
    """Endless (x, y) numpy batches of a 10-class problem on 32 features;
    the same rule on every rank, different samples per rank."""
    w = np.random.default_rng(0).normal(size=(32, 10))
    rng = np.random.default_rng(700 + rank)
    while True:
        x = rng.normal(size=(batch_size, 32)).astype(np.float32)
        yield x, np.argmax(x @ w, axis=1).astype(np.int64)


def dense(x, units, name, activation=None):
    with v1.variable_scope(name):
        w = v1.get_variable("kernel", (x.shape[-1], units),
                            initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("bias", (units,),
                            initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def main() -> int:
    args = parse_args()
    v1.disable_eager_execution()
    hvd.init()

    x = v1.placeholder(tf.float32, (None, 32), name="x")
    y = v1.placeholder(tf.int64, (None,), name="y")
    logits = dense(dense(x, 64, "hidden", tf.nn.relu), 10, "logits")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    global_step = v1.train.get_or_create_global_step()
    opt = v1.train.MomentumOptimizer(args.lr * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt)
    train_op = opt.minimize(loss, global_step=global_step)

    steps = max(1, args.steps // hvd.size())
    hooks = [
        hvd.BroadcastGlobalVariablesHook(0),
        v1.train.StopAtStepHook(last_step=steps),
    ]
    checkpoint_dir = None
    if hvd.rank() == 0:
        checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="ckpt_")
    config = v1.ConfigProto(
        intra_op_parallelism_threads=max(1, (os.cpu_count() or 1)
                                         // hvd.local_size()),
        inter_op_parallelism_threads=2)

    weights = v1.trainable_variables()
    data = batches(hvd.rank(), args.batch_size)
    last = None
    with v1.train.MonitoredTrainingSession(
            checkpoint_dir=checkpoint_dir, hooks=hooks, config=config,
            save_checkpoint_steps=max(1, steps // 2)) as sess:
        while not sess.should_stop():
            xb, yb = next(data)
            _, step, value, last = sess.run(
                [train_op, global_step, loss, weights], {x: xb, y: yb})
            if hvd.rank() == 0 and step % 20 == 0:
                print("step %d: loss %.4f" % (step, value))

    for rank, theirs in enumerate(hvd.allgather_object(last)):
        if not all(np.array_equal(a, b) for a, b in zip(last, theirs)):
            print("rank %d: weights differ from rank %d" % (hvd.rank(), rank),
                  file=sys.stderr)
            return 1
    if hvd.rank() == 0:
        checkpoint = tf.train.latest_checkpoint(checkpoint_dir)
        if checkpoint is None:
            print("rank 0 wrote no checkpoint", file=sys.stderr)
            return 1
        print("done: %d steps on %d ranks, last loss %.4f, checkpoint %s; "
              "weights identical on all ranks" % (steps, hvd.size(), value,
                                                 checkpoint))
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
