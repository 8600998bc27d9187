"""Data-sync step weights in the gradient reduction (hbcore_tf._parallel.step_weight
and hbcore_tf._parallel.gradient_reduction).

Rank 1 plays the rank that ran out of data: its step weight is 0 and its
gradient is NaN (the mean loss of an empty batch is 0/0); every other rank
has data (weight 1) and the gradient rank + 1. The reduced gradient must
be the mean over the ranks with data (Sum: their sum), identical on every
rank and never NaN. Expected values are computed here from the rank
numbers, not through hbcore. Run by tests/tf/test_step_weight.py.
"""
import numpy as np

from train_common import (Checker, check, close, expect_raises, report,
                          run_table, tf)

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._parallel import step_weight as _step_weight  # noqa: E402

CASES = [
    "optimizer/eager", "optimizer/function", "optimizer/graph",
    "tape/eager", "tape/function",
    "sparse/function", "groups/function", "sum-op/function",
    "no-weight/function", "nobody-has-data/function",
    "batch-weight", "graph-one-iterator-only",
]
EMPTY_RANK = 1


def has_data(rank: int) -> bool:
    return rank != EMPTY_RANK


def local_grad(rank: int, shape=(3,)) -> np.ndarray:
    value = rank + 1.0 if has_data(rank) else np.nan
    return np.full(shape, value, np.float32)


def expected_mean(size: int, shape=(3,)) -> np.ndarray:
    ranks = [r for r in range(size) if has_data(r)]
    return np.full(shape, np.mean([r + 1.0 for r in ranks]))


def my_weight(rank: int) -> float:
    return 1.0 if has_data(rank) else 0.0


def case_optimizer(mode: str, rank: int, size: int) -> None:
    if mode == "graph":
        with tf.Graph().as_default():
            var = tf.compat.v1.get_variable(
                "v", initializer=np.zeros(3, np.float32))
            _step_weight.register_in_graph(tf.constant(my_weight(rank)))
            opt = hvd.DistributedOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(1.0))
            # d(loss)/d(var) is this rank's local gradient (NaN on the
            # rank without data).
            grads = opt.compute_gradients(
                tf.reduce_sum(var * tf.constant(local_grad(rank))), [var])
            train = opt.apply_gradients(grads)
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(train)
                value = sess.run(var)
        close(value, -expected_mean(size), "graph optimizer update")
        return
    var = tf.Variable(np.zeros(3, np.float32))
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(1.0))

    def step():
        with _step_weight.using(tf.constant(my_weight(rank))):
            opt.apply_gradients([(tf.constant(local_grad(rank)), var)])

    (tf.function(step) if mode == "function" else step)()
    close(var, -expected_mean(size), "%s optimizer update" % mode)


def case_tape(mode: str, rank: int, size: int) -> None:
    var = tf.Variable(np.ones(3, np.float32))

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var * tf.constant(local_grad(rank)))
        tape = hvd.DistributedGradientTape(tape)
        with _step_weight.using(tf.constant(my_weight(rank))):
            return tape.gradient(loss, [var])[0]

    got = (tf.function(grads) if mode == "function" else grads)()
    close(got, expected_mean(size), "%s tape gradient" % mode)


def case_sparse(rank: int, size: int) -> None:
    table = tf.Variable(np.zeros((4, 2), np.float32))
    scale = local_grad(rank, (1,))[0]

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            rows = tf.gather(table, [rank % 4])
            loss = tf.reduce_sum(rows) * scale
        tape = hvd.DistributedGradientTape(tape)
        with _step_weight.using(tf.constant(my_weight(rank))):
            return tf.convert_to_tensor(tape.gradient(loss, [table])[0])

    expected = np.zeros((4, 2))
    ranks = [r for r in range(size) if has_data(r)]
    for r in ranks:
        expected[r % 4] += (r + 1.0) / len(ranks)
    close(grads(), expected, "sparse gradient")


def case_groups(rank: int, size: int) -> None:
    variables = [tf.Variable(np.zeros(2, np.float32)) for _ in range(5)]

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = sum(tf.reduce_sum(v * tf.constant(local_grad(rank, (2,))))
                       * (i + 1) for i, v in enumerate(variables))
        tape = hvd.DistributedGradientTape(tape, groups=2)
        with _step_weight.using(tf.constant(my_weight(rank))):
            return tape.gradient(loss, variables)

    for i, got in enumerate(grads()):
        close(got, expected_mean(size, (2,)) * (i + 1), "group grad %d" % i)


def case_sum_op(rank: int, size: int) -> None:
    var = tf.Variable(np.ones(3, np.float32))

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var * tf.constant(local_grad(rank)))
        tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)
        with _step_weight.using(tf.constant(my_weight(rank))):
            return tape.gradient(loss, [var])[0]

    ranks = [r for r in range(size) if has_data(r)]
    close(grads(), np.full(3, sum(r + 1.0 for r in ranks)), "Sum gradient")


def case_no_weight(rank: int, size: int) -> None:
    var = tf.Variable(np.ones(3, np.float32))

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var * float(rank + 1))
        return hvd.DistributedGradientTape(tape).gradient(loss, [var])[0]

    close(grads(), np.full(3, np.mean(np.arange(size) + 1.0)),
          "unweighted average")


def case_nobody(rank: int, size: int) -> None:
    var = tf.Variable(np.ones(3, np.float32))

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(var) / tf.constant(0.0)
        tape = hvd.DistributedGradientTape(tape)
        with _step_weight.using(tf.constant(0.0)):
            return tape.gradient(loss, [var])[0]

    close(grads(), np.zeros(3), "gradient when no rank has data")


def case_batch_weight() -> None:
    bw = _step_weight.batch_weight
    close(bw({"a": tf.zeros([0, 3]), "b": tf.ones([0])}), 0.0, "empty dict")
    close(bw((tf.ones([2, 3]), tf.ones([2]))), 1.0, "tuple")
    close(bw(tf.ragged.constant([[1], [2, 3]])), 1.0, "ragged")
    close(bw(tf.sparse.SparseTensor(tf.zeros([0, 2], tf.int64), [],
                                    [0, 4])), 0.0, "empty sparse")
    expect_raises(lambda: bw(()), ValueError, "holds no tensor")


def case_one_iterator_only() -> None:
    with tf.Graph().as_default():
        _step_weight.register_in_graph(tf.constant(1.0))
        expect_raises(lambda: _step_weight.register_in_graph(
            tf.constant(1.0)), ValueError, "one data-sync iterator")
    check(_step_weight.current() is None, "a weight leaked out of its graph")


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)
    table = {
        "optimizer/eager": lambda: case_optimizer("eager", rank, size),
        "optimizer/function": lambda: case_optimizer("function", rank, size),
        "optimizer/graph": lambda: case_optimizer("graph", rank, size),
        "tape/eager": lambda: case_tape("eager", rank, size),
        "tape/function": lambda: case_tape("function", rank, size),
        "sparse/function": lambda: case_sparse(rank, size),
        "groups/function": lambda: case_groups(rank, size),
        "sum-op/function": lambda: case_sum_op(rank, size),
        "no-weight/function": lambda: case_no_weight(rank, size),
        "nobody-has-data/function": lambda: case_nobody(rank, size),
        "batch-weight": case_batch_weight,
        "graph-one-iterator-only": case_one_iterator_only,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
