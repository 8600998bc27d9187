"""Gradient reduction on a process set from ranks outside it, as Horovod:
DistributedGradientTape, DistributedOptimizer (Keras 3 and
tf.compat.v1) and hbcore_tf.keras.DistributedOptimizer built on a set this
rank is not in hand back the rank's own gradients, issuing no collective;
on the set's members they are averaged over the members only.

Two sets cover every rank: the even ranks and the odd ranks, so each rank
is a member of one and outside the other. Every rank reduces on the even
set first, then on the odd set (members' collectives pair up; outsiders
issue none). Expected values are computed with numpy from every rank's
seeded data. Run by tests/tf/test_tf_process_sets.py at 2 and 3
ranks.
"""
from typing import Callable

import numpy as np

from train_common import (Checker, close, env_size, rank_values, report,
                          run_table, tf)

import hbcore_tf as hvd  # noqa: E402

CASES = ["tape_eager", "tape_function", "v1_optimizer", "keras_optimizer",
         "keras_module_optimizer"]


def expected_grad(ps: "hvd.ProcessSet", seed: int, rank: int,
                  shape=(4,)) -> np.ndarray:
    """The gradient of sum(w * x_rank) after reduction on ``ps``: the mean
    of the members' x for a member, this rank's own x otherwise."""
    if rank in ps.ranks:
        return np.mean([rank_values(seed, r, shape).astype(np.float64)
                        for r in ps.ranks], axis=0)
    return rank_values(seed, rank, shape).astype(np.float64)


def tape_grad(ps: "hvd.ProcessSet", x: np.ndarray,
              w: tf.Variable) -> tf.Tensor:
    """d/dw sum(w * x) through a DistributedGradientTape on ``ps``."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x)
    tape = hvd.DistributedGradientTape(tape, process_set=ps)
    (grad,) = tape.gradient(loss, [w])
    return grad


def main() -> None:
    size = env_size()
    even = hvd.ProcessSet(range(0, size, 2))
    odd = hvd.ProcessSet(range(1, size, 2))
    hvd.init(process_sets=[even, odd])
    rank = hvd.rank()
    sets = [even, odd]
    checker = Checker(rank)

    def each_set(case: str,
                 body: Callable[["hvd.ProcessSet", int], None]) -> None:
        """Runs ``body(ps, seed)`` on the even set, then the odd set, on
        every rank; a global barrier keeps the cases in step."""
        for number, ps in enumerate(sets):
            body(ps, 100 * (CASES.index(case) + 1) + number)
        hvd.barrier()

    def tape_eager() -> None:
        def body(ps, seed):
            x = rank_values(seed, rank, (4,))
            w = tf.Variable(np.ones(4, np.float32))
            close(tape_grad(ps, x, w), expected_grad(ps, seed, rank),
                  "eager tape on %s" % ps)
        each_set("tape_eager", body)

    def tape_function() -> None:
        def body(ps, seed):
            x = rank_values(seed, rank, (4,))
            w = tf.Variable(np.ones(4, np.float32))
            fn = tf.function(lambda: tape_grad(ps, x, w))
            for _ in range(2):  # traced once, run twice
                close(fn(), expected_grad(ps, seed, rank),
                      "tf.function tape on %s" % ps)
        each_set("tape_function", body)

    def v1_optimizer() -> None:
        def body(ps, seed):
            x = rank_values(seed, rank, (4,))
            with tf.Graph().as_default():
                w = tf.compat.v1.Variable(np.zeros(4, np.float32))
                loss = tf.reduce_sum(w * x)
                opt = hvd.DistributedOptimizer(
                    tf.compat.v1.train.GradientDescentOptimizer(1.0),
                    process_set=ps)
                train = opt.minimize(loss, var_list=[w])
                with tf.compat.v1.Session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    sess.run(train)
                    got = sess.run(w)
            close(got, -expected_grad(ps, seed, rank),
                  "v1 optimizer step on %s" % ps)
        each_set("v1_optimizer", body)

    def keras_optimizer() -> None:
        import keras

        def body(ps, seed):
            x = rank_values(seed, rank, (4,))
            w = tf.Variable(np.zeros(4, np.float32))
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0),
                                           process_set=ps)
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(w * x)
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            close(w, -expected_grad(ps, seed, rank),
                  "keras optimizer step on %s" % ps)
        each_set("keras_optimizer", body)

    def keras_module_optimizer() -> None:
        # Horovod's own process-set Keras test: the gradient is the rank;
        # members get the mean of the members' ranks, others their rank.
        import keras

        import hbcore_tf.keras as hvd_keras

        def body(ps, seed):
            del seed
            w = tf.Variable([0.0])
            opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(-1.0),
                                                 process_set=ps)
            opt.apply_gradients([(tf.constant([float(rank)]), w)])
            want = (np.mean(ps.ranks) if rank in ps.ranks else float(rank))
            close(w, [want], "hbcore_tf.keras optimizer on %s" % ps)
        each_set("keras_module_optimizer", body)

    table = {"tape_eager": tape_eager, "tape_function": tape_function,
             "v1_optimizer": v1_optimizer, "keras_optimizer": keras_optimizer,
             "keras_module_optimizer": keras_module_optimizer}

    run_table(checker, table, CASES)
    report({"ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
