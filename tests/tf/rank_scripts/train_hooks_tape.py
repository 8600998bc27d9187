"""DistributedGradientTape in the idiomatic eager loop (a tape wrapped anew
every step) and with sources that are not variables.

The loss is sum(w * x_r) with rank-seeded x_r, so each rank's gradient
is its own x_r and the reduced gradient is numpy's mean over the ranks'
x_r. Run by tests/tf/test_train_hooks.py under hbrun at 2 and 3 ranks.
"""
import numpy as np

from train_common import (Checker, check, close, mean_over_ranks,
                          rank_values, report, run_table, tf)

import hbcore_tf as hvd  # noqa: E402

SHAPE = (3, 4)
STEPS = 4
CASES = ["wrap_each_step_traces_once", "locals_stay_per_tape",
         "tensor_sources_and_none"]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def x(seed):
        return rank_values(seed, rank, SHAPE)

    def mean_x(seed):
        return mean_over_ranks(lambda r: rank_values(seed, r, SHAPE), size)

    def wrap_each_step_traces_once():
        """A new tape per step: the eager reduction is traced once, not
        once per step (the same tf.function serves every step)."""
        w = tf.Variable(np.ones(SHAPE, np.float32))
        functions = {}
        for k in range(STEPS):
            with tf.GradientTape(persistent=True) as tape:
                loss = tf.reduce_sum(w * x(600 + k))
                loss2 = 2.0 * loss
            tape = hvd.DistributedGradientTape(tape, op=hvd.Average)
            first = tape.gradient(loss, [w])[0]
            again = tape.gradient(loss2, [w])[0]
            close(first, mean_x(600 + k), "step %d gradient" % k)
            close(again, 2.0 * mean_x(600 + k), "step %d second gradient" % k)
            for fn in tape._hb_reducer._eager_fns.values():  # noqa: SLF001
                functions[id(fn)] = fn
        check(len(functions) == 1, "%d eager reductions for %d steps" % (
            len(functions), STEPS))
        traces = [f.experimental_get_tracing_count()
                  for f in functions.values()]
        check(traces == [1], "traced %s times" % traces)

    def locals_stay_per_tape():
        """register_local_source on one tape does not make the variable
        local for the next tape (the reductions are shared, the local
        sources are not)."""
        ws = [tf.Variable(np.ones(SHAPE, np.float32)) for _ in range(2)]
        for k, local in enumerate([True, False, True]):
            seed = 610 + 2 * k
            with tf.GradientTape() as tape:
                loss = (tf.reduce_sum(ws[0] * x(seed)) +
                        tf.reduce_sum(ws[1] * x(seed + 1)))
            tape = hvd.DistributedGradientTape(tape)
            if local:
                tape.register_local_source(ws[1])
            grads = tape.gradient(loss, ws)
            close(grads[0], mean_x(seed), "shared gradient, tape %d" % k)
            want = x(seed + 1) / size if local else mean_x(seed + 1)
            close(grads[1], want, "%s gradient, tape %d" % (
                "local" if local else "reduced", k))

    def tensor_sources_and_none():
        """A watched tensor as a source is reduced like a variable; an
        unconnected variable gets None, eager and in tf.function."""
        w = tf.Variable(np.ones(SHAPE, np.float32))
        unused = tf.Variable(1.0)
        xs = tf.constant(x(620))

        def grads():
            with tf.GradientTape() as tape:
                tape.watch(xs)
                loss = tf.reduce_sum(w * xs * xs)
            tape = hvd.DistributedGradientTape(tape)
            return tape.gradient(loss, [w, xs, unused])

        want_w = mean_over_ranks(
            lambda r: rank_values(620, r, SHAPE) ** 2, size)
        for mode, fn in (("eager", grads), ("tf.function",
                                            tf.function(grads))):
            g_w, g_x, g_unused = fn()
            close(g_w, want_w, "%s: variable gradient" % mode)
            close(g_x, mean_over_ranks(
                lambda r: 2.0 * rank_values(620, r, SHAPE), size),
                "%s: tensor gradient" % mode)
            check(g_unused is None, "%s: unconnected gradient %r" % (
                mode, g_unused))

    table = {"wrap_each_step_traces_once": wrap_each_step_traces_once,
             "locals_stay_per_tape": locals_stay_per_tape,
             "tensor_sources_and_none": tensor_sources_and_none}
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
