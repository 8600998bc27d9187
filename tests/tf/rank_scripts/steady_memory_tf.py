"""Rank script: a long TensorFlow training loop holds its memory steady.

    hbrun -np N python steady_memory_tf.py STEPS

Each step runs a tf.function training step (DistributedGradientTape's
allreduces inside the graph, as the op kernels run them in every graph
mode) and eager ops: an allreduce, an allgather whose first dimension
changes from step to step, and a broadcast. The eager results are checked
against numpy every step; at the end every rank's variables must equal
rank 0's. The process's anonymous resident memory (RssAnon) is read at a
third, two thirds and the end of the steps (tests/tf/
test_steady_memory_tf.py bounds its growth).
"""
import sys

import numpy as np

import train_common  # noqa: F401 - one intra-op/inter-op thread per rank
from common import anon_rss_bytes, env_rank, report

import tensorflow as tf  # noqa: E402

import hbcore_tf as hvd  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1])
    rank = env_rank()
    hvd.init()
    size = hvd.size()
    rng = np.random.default_rng(rank)
    w1 = tf.Variable(rng.normal(size=(16, 32)), dtype=tf.float32)
    w2 = tf.Variable(rng.normal(size=(32, 1)), dtype=tf.float32)
    hvd.broadcast_variables([w1, w2], root_rank=0)
    x = tf.constant(rng.normal(size=(32, 16)), tf.float32)
    y = tf.constant(rng.normal(size=(32, 1)), tf.float32)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.tanh(x @ w1) @ w2 - y) ** 2)
        grads = hvd.DistributedGradientTape(tape).gradient(loss, [w1, w2])
        for var, grad in zip((w1, w2), grads):
            var.assign_sub(0.01 * grad)
        return hvd.allreduce(loss)

    ranks_sum = size * (size - 1) / 2
    marks = [steps // 3, 2 * steps // 3, steps]
    rss = []
    for i in range(steps):
        train_step()
        total = hvd.allreduce(tf.fill([100], float(rank)), op=hvd.Sum,
                              name="eager")
        if not np.all(total.numpy() == ranks_sum):
            raise AssertionError("step %d: eager allreduce %r" % (i, total))
        rows = 1 + i % 3
        gathered = hvd.allgather(tf.fill([rows + rank, 2], float(rank)))
        want = np.concatenate([np.full((rows + r, 2), r, np.float32)
                               for r in range(size)])
        if not np.array_equal(gathered.numpy(), want):
            raise AssertionError("step %d: allgather" % i)
        sent = hvd.broadcast(tf.fill([5], float(i * size + rank)), 0)
        if not np.all(sent.numpy() == i * size):
            raise AssertionError("step %d: broadcast %r" % (i, sent))
        if i + 1 in marks:
            rss.append(anon_rss_bytes())
    flat = tf.concat([tf.reshape(w1, [-1]), tf.reshape(w2, [-1])], 0)
    on_rank0 = hvd.broadcast(flat, 0, name="final")
    if not np.array_equal(flat.numpy(), on_rank0.numpy()):
        raise AssertionError("rank %d's variables differ from rank 0's"
                             % rank)
    report({"marks": marks, "anon_rss": rss})


if __name__ == "__main__":
    main()
