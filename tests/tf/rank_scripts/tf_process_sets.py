"""hbcore_tf with process sets: every collective on two overlapping sets
(the first n-1 ranks, the last n-1 ranks) eagerly, in tf.function and in a
tf.compat.v1 graph; gradients of the ops over the op's set; broadcast
variables, DistributedGradientTape and DistributedOptimizer on a set.
Expected values come from numpy over the members' rank-seeded data. Run by
tests/tf/test_tf_process_sets.py under hbrun at 3 and 4 ranks.
"""
import zlib

import numpy as np

from train_common import (Checker, check, close, env_size, expect_raises,
                          rank_values, report, tf)

import hbcore_tf as hvd  # noqa: E402

CASES = ["eager", "tf_function", "v1_graph", "gradients", "broadcast_vars",
         "tape", "optimizer", "keras_callbacks", "non_member", "set_ops"]


def members_of(size):
    return [list(range(size - 1)), list(range(1, size))]


def collectives(ps, tag, rank):
    """Every collective on ``ps``; returns (outputs dict) of tensors."""
    m = ps.ranks
    k = m.index(rank)
    x = tf.constant(rank_values(zlib.crc32(tag.encode()) % 1000, rank, (4,)))
    out = {
        "allreduce": hvd.allreduce(x, op=hvd.Sum, process_set=ps,
                                   name=tag + ".ar"),
        "average": hvd.allreduce(x, process_set=ps, name=tag + ".avg"),
        "grouped": hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum,
                                         process_set=ps, name=tag + ".g")[1],
        "allgather": hvd.allgather(tf.fill([k + 1, 2], float(rank)),
                                   process_set=ps, name=tag + ".ag"),
        "grouped_allgather": hvd.grouped_allgather(
            [tf.fill([1], float(rank))], process_set=ps,
            name=tag + ".gag")[0],
        "broadcast": hvd.broadcast(x, root_rank=m[-1], process_set=ps,
                                   name=tag + ".bc"),
        "alltoall": hvd.alltoall(tf.fill([len(m)], float(rank)),
                                 process_set=ps, name=tag + ".a2a"),
        "reducescatter": hvd.reducescatter(
            tf.reshape(tf.tile(x, [len(m)]), [len(m), 4]), op=hvd.Sum,
            process_set=ps, name=tag + ".rs"),
        "grouped_reducescatter": hvd.grouped_reducescatter(
            [tf.ones([len(m), 2]) * float(rank)], op=hvd.Sum,
            process_set=ps, name=tag + ".grs")[0],
    }
    hvd.barrier(process_set=ps, name=tag + ".barrier")
    return out


def expected(ps, tag, rank):
    m = ps.ranks
    k = m.index(rank)
    xs = [rank_values(zlib.crc32(tag.encode()) % 1000, r, (4,)) for r in m]
    total = np.sum(xs, axis=0)
    return {
        "allreduce": total,
        "average": total / len(m),
        "grouped": 2 * total,
        "allgather": np.concatenate([np.full((i + 1, 2), float(r))
                                     for i, r in enumerate(m)]),
        "grouped_allgather": np.array(m, np.float32),
        "broadcast": xs[-1],
        "alltoall": np.array(m, np.float32),
        "reducescatter": total[None, :],
        "grouped_reducescatter": np.full((1, 2), float(sum(m))),
    }


def check_all(got, want, what):
    for key in want:
        close(np.asarray(got[key]), want[key], "%s %s" % (what, key))


def main():
    sets = [hvd.ProcessSet(m) for m in members_of(env_size())]
    hvd.init(process_sets=sets)
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)
    mine = [ps for ps in sets if ps.included()]

    def eager():
        for ps in mine:
            tag = "eager%d" % ps.process_set_id
            check_all(collectives(ps, tag, rank), expected(ps, tag, rank),
                      "eager")
        hvd.barrier()

    def in_function():
        for ps in mine:
            tag = "fn%d" % ps.process_set_id
            fn = tf.function(lambda ps=ps, tag=tag: collectives(ps, tag, rank))
            for _ in range(2):
                check_all(fn(), expected(ps, tag, rank), "tf.function")
        hvd.barrier()

    def v1_graph():
        for ps in mine:
            tag = "v1_%d" % ps.process_set_id
            with tf.Graph().as_default():
                outs = collectives(ps, tag, rank)
                with tf.compat.v1.Session() as sess:
                    got = sess.run(outs)
            check_all(got, expected(ps, tag, rank), "v1 graph")
        hvd.barrier()

    def gradients():
        # d/dx sum(allgather(x) * w) on a set: this member's rows of the
        # Average-allreduced w; d/dx of allreduce(x) (Sum) * w: Sum of w.
        for ps in mine:
            m = ps.ranks
            k = m.index(rank)
            x = tf.Variable(np.full((2, 3), float(rank), np.float32))
            w = tf.constant(np.arange(6 * len(m), dtype=np.float32)
                            .reshape(2 * len(m), 3))
            with tf.GradientTape() as tape:
                g = hvd.allgather(x, process_set=ps,
                                  name="grad.ag%d" % ps.process_set_id)
                loss = tf.reduce_sum(g * w)
            close(tape.gradient(loss, x).numpy(), w.numpy()[2 * k:2 * k + 2],
                  "allgather gradient")
            with tf.GradientTape() as tape:
                s = hvd.allreduce(x, op=hvd.Sum, process_set=ps,
                                  name="grad.ar%d" % ps.process_set_id)
                loss = tf.reduce_sum(s * float(rank + 1))
            want = np.full((2, 3), float(sum(r + 1 for r in m)))
            close(tape.gradient(loss, x).numpy(), want, "allreduce gradient")
        hvd.barrier()

    def broadcast_vars():
        for ps in mine:
            v = tf.Variable(np.full(3, float(rank), np.float32))
            hvd.broadcast_variables([v], root_rank=ps.ranks[0],
                                    process_set=ps)
            close(v.numpy(), np.full(3, float(ps.ranks[0])), "broadcast_vars")
            obj = hvd.broadcast_object({"r": rank}, root_rank=ps.ranks[-1],
                                       process_set=ps)
            check(obj == {"r": ps.ranks[-1]}, "broadcast_object %s" % obj)
            objs = hvd.allgather_object(rank, process_set=ps)
            check(objs == ps.ranks, "allgather_object %s" % objs)
        hvd.barrier()

    def tape():
        for ps in mine:
            w = tf.Variable(np.ones(4, np.float32))
            x = rank_values(7, rank, (4,))
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(w * x)
            t = hvd.DistributedGradientTape(t, process_set=ps)
            (grad,) = t.gradient(loss, [w])
            want = np.mean([rank_values(7, r, (4,)) for r in ps.ranks], 0)
            close(grad.numpy(), want, "tape gradient")
        hvd.barrier()

    def optimizer():
        import keras
        for ps in mine:
            w = tf.Variable(np.zeros(4, np.float32))
            x = rank_values(11, rank, (4,))
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0),
                                           process_set=ps)
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(w * x)
            grads = t.gradient(loss, [w])
            opt.apply_gradients(zip(grads, [w]))
            want = -np.mean([rank_values(11, r, (4,)) for r in ps.ranks], 0)
            close(w.numpy(), want, "optimizer step")
        hvd.barrier()

    def keras_callbacks():
        # The first set: the root's weights reach its members only, and the
        # epoch's loss is averaged over its members only.
        import keras

        import hbcore_tf.keras as hvd_keras
        ps = sets[0]
        root = ps.ranks[-1]
        keras.utils.set_random_seed(100 + rank)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
        before = [w.copy() for w in model.get_weights()]
        roots = hvd.allgather_object(before if rank == root else None)[root]
        x = np.full((4, 3), float(rank), np.float32)
        y = np.zeros((4, 2), np.float32)
        loss_of = lambda: float(model.evaluate(x, y, verbose=0))  # noqa: E731
        history = model.fit(
            x, y, batch_size=4, epochs=1, verbose=0, callbacks=[
                hvd_keras.callbacks.BroadcastGlobalVariablesCallback(
                    root, process_set=ps),
                hvd_keras.callbacks.MetricAverageCallback(process_set=ps)])
        after = model.get_weights()
        for got, own, want in zip(after, before, roots):
            close(got, want if ps.included() else own, "callback weights")
        # SGD(0) keeps the weights, so a member's own loss is that of the
        # broadcast weights on its own data; the logged loss is the mean
        # over the set's members.
        losses = hvd.allgather_object(loss_of())
        want = (np.mean([losses[r] for r in ps.ranks]) if ps.included()
                else losses[rank])
        close(np.float64(history.history["loss"][0]), np.float64(want),
              "averaged loss")
        hvd.barrier()

    def non_member():
        for ps in sets:
            if ps.included():
                continue
            expect_raises(lambda: hvd.allreduce(tf.ones(2), process_set=ps),
                          tf.errors.InvalidArgumentError,
                          "not a member of process set")
            check(int(hvd.process_set_included_op(ps.process_set_id)) == 0,
                  "included op")
        for ps in mine:
            check(int(hvd.size_op(ps.process_set_id)) == len(ps.ranks),
                  "size_op")
        hvd.barrier()

    def set_ops():
        expect_raises(lambda: hvd.add_process_set([0]), ValueError,
                      "HOROVOD_DYNAMIC_PROCESS_SETS")
        check(hvd.global_process_set.ranks == list(range(size)),
              "global ranks")

    table = {"eager": eager, "tf_function": in_function,
             "v1_graph": v1_graph, "gradients": gradients,
             "broadcast_vars": broadcast_vars, "tape": tape,
             "optimizer": optimizer, "keras_callbacks": keras_callbacks,
             "non_member": non_member,
             "set_ops": set_ops}
    for name in CASES:
        checker.run(name, table[name])
    report({"ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
