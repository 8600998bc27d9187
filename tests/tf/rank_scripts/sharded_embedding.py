"""Sharded embedding tables (hb.embedding_scope) in tf.compat.v1 graphs,
tf.function and eager, at any rank count.

Every case trains (or looks up) a model whose embedding table is sharded
across the ranks and compares each rank's rows, and the dense weights,
with plain single-process TensorFlow (no hbcore, a full table) trained on
the whole batch of every step (every rank's batch concatenated in rank
order). Batches hold duplicate ids, an id every rank sees and ids only one
rank sees. The table has an odd row count, so the blocks are uneven at 2
and at 3 ranks. Run by tests/tf/test_sharded_embedding.py under hbrun.
"""
import numpy as np

from train_common import (Checker, check, close, expect_raises, rank_values,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore_tf._parallel import step_weight as _step_weight  # noqa: E402
from hbcore_tf.embedding import is_sharded, shard_info  # noqa: E402
from hbcore_tf._base.options import options  # noqa: E402

CASES = ["v1_sgd", "v1_adagrad", "v1_adam", "v1_ftrl", "v1_two_tables",
         "v1_not_unique", "v1_wire_float16", "v1_lookup_sparse",
         "v1_small_table_replicated", "v1_out_of_range_id",
         "tf_function_keras_sgd", "eager_tape", "empty_batch_data_sync",
         "v1_data_sync_unbalanced"]
ROWS, DIM, BATCH, HOT, STEPS, LR = 23, 4, 4, 3, 3, 0.1
V1 = tf.compat.v1


def table0(rows=ROWS, seed=5):
    return 0.5 * rank_values(seed, 0, (rows, DIM))


def dense0():
    return [0.5 * rank_values(6, 0, (DIM, 1)), np.zeros([1], np.float32)]


def batch(step, rank, rows=ROWS):
    """ids [BATCH, HOT] with a duplicate within a row, id 7 on every rank
    and id rows-1-rank on this rank only; labels [BATCH, 1]."""
    rng = np.random.default_rng([300 + step, rank])
    ids = rng.integers(0, rows - 4, size=(BATCH, HOT)).astype(np.int64)
    ids[0, 1] = ids[0, 0]
    ids[1, 0] = 7
    ids[2, 2] = rows - 1 - rank
    return ids, rank_values(400 + step, rank, (BATCH, 1))


def whole_batch(step, ranks, rows=ROWS):
    ids, ys = zip(*[batch(step, r, rows) for r in ranks])
    return np.concatenate(ids), np.concatenate(ys)


def forward(table, w, b, ids):
    emb = tf.nn.embedding_lookup(table, ids)
    return tf.matmul(tf.tanh(tf.reduce_sum(emb, axis=1)), w) + b


def mse(table, w, b, ids, y):
    return tf.reduce_mean(tf.square(forward(table, w, b, ids) - y))


def v1_reference(make_opt, step_batches):
    """Plain TF v1 in one process with the full table, one step per
    (ids, y) batch of ``step_batches``; returns [table, w, b]."""
    with tf.Graph().as_default():
        table = V1.get_variable("emb", initializer=tf.constant(table0()))
        w, b = [V1.get_variable(n, initializer=tf.constant(v))
                for n, v in zip("wb", dense0())]
        ids = V1.placeholder(tf.int64, (None, HOT))
        y = V1.placeholder(tf.float32, (None, 1))
        train = make_opt().minimize(mse(table, w, b, ids, y))
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for bi, by in step_batches:
                sess.run(train, {ids: bi, y: by})
            return sess.run([table, w, b])


def v1_expected(make_opt, ranks, steps=STEPS):
    """Plain TF v1, full table, whole batch of ``ranks`` per step."""
    return v1_reference(make_opt, [whole_batch(k, ranks)
                                   for k in range(steps)])


def v1_sharded(make_opt, rank, steps=STEPS, **scope_options):
    """The same model with the table sharded; returns (shard, w, b, info,
    slot shapes)."""
    with tf.Graph().as_default():
        with hb.scope(**scope_options):
            with hb.embedding_scope():
                table = V1.get_variable(
                    "emb", shape=[ROWS, DIM],
                    initializer=V1.constant_initializer(table0()))
            w, b = [V1.get_variable(n, initializer=tf.constant(v))
                    for n, v in zip("wb", dense0())]
            ids = V1.placeholder(tf.int64, (None, HOT))
            y = V1.placeholder(tf.float32, (None, 1))
            opt = make_opt()
            train = opt.minimize(mse(table, w, b, ids, y))
        slots = [opt.get_slot(table, n) for n in opt.get_slot_names()]
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k in range(steps):
                sess.run(train, dict(zip((ids, y), batch(k, rank))))
            got = sess.run([table, w, b])
        return got, shard_info(table), [s.shape for s in slots if s is not None]


def check_shard(shard, info, expected_table, what, rtol=1e-5, atol=1e-6):
    begin, end = info.offset, info.offset + info.rows
    close(shard, expected_table[begin:end], what, rtol=rtol, atol=atol)


def main():
    rank = hb.context.rank
    size = hb.context.world_size
    ranks = list(range(size))
    checker = Checker(rank)

    def v1_case(make_opt, slots=0):
        def run():
            (shard, w, b), info, slot_shapes = v1_sharded(make_opt, rank)
            full, ew, eb = v1_expected(make_opt, ranks)
            q, rem = divmod(ROWS, size)
            check(info.rows == q + (rank < rem) and shard.shape ==
                  (info.rows, DIM), "shard shape %s, info %s" % (
                      shard.shape, info))
            check(len(slot_shapes) == slots and all(
                tuple(s) == (info.rows, DIM) for s in slot_shapes),
                "slot shapes %s" % slot_shapes)
            check_shard(shard, info, full, "table rows", rtol=1e-4, atol=1e-5)
            close(w, ew, "w", rtol=1e-4, atol=1e-5)
            close(b, eb, "b", rtol=1e-4, atol=1e-5)
        return run

    def v1_two_tables():
        """Two sharded tables looked up in one step (their exchanges run
        concurrently in the graph) train like two plain tables."""
        def model(sharded):
            scope = hb.embedding_scope() if sharded else _null()
            with scope:
                t1 = V1.get_variable("t1", initializer=tf.constant(table0()))
                t2 = V1.get_variable("t2", initializer=tf.constant(
                    table0(seed=9)))
            ids = V1.placeholder(tf.int64, (None, HOT))
            y = V1.placeholder(tf.float32, (None, 1))
            e = tf.reduce_sum(tf.nn.embedding_lookup(t1, ids) *
                              tf.nn.embedding_lookup(t2, ids[:, ::-1]), [1, 2])
            loss = tf.reduce_mean(tf.square(e[:, None] - y))
            return [t1, t2], ids, y, loss

        with tf.Graph().as_default():
            ts, ids, y, loss = model(False)
            train = V1.train.AdagradOptimizer(LR).minimize(loss)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(STEPS):
                    sess.run(train, dict(zip((ids, y), whole_batch(k, ranks))))
                expected = sess.run(ts)
        with tf.Graph().as_default():
            with hb.scope():
                ts, ids, y, loss = model(True)
                train = V1.train.AdagradOptimizer(LR).minimize(loss)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(STEPS):
                    sess.run(train, dict(zip((ids, y), batch(k, rank))))
                got = sess.run(ts)
        for t, g, e in zip(ts, got, expected):
            check_shard(g, shard_info(t), e, t.name, rtol=1e-4, atol=1e-5)

    def v1_option_case(**scope_options):
        def run():
            make = lambda: V1.train.GradientDescentOptimizer(LR)  # noqa: E731
            (shard, w, _), info, _ = v1_sharded(make, rank, **scope_options)
            full, ew, _ = v1_expected(make, ranks)
            tol = 2e-3 if "emb_wire_dtype" in scope_options else 1e-5
            check_shard(shard, info, full, "table rows", rtol=tol, atol=tol)
            close(w, ew, "w", rtol=tol, atol=tol)
        return run

    def v1_lookup_sparse():
        """embedding_lookup_sparse and safe_embedding_lookup_sparse (mean
        combiner, weights) on a sharded table equal the full table's."""
        sp = V1.SparseTensorValue(
            indices=[[0, 0], [0, 1], [1, 0], [2, 0], [2, 1], [2, 2]],
            values=np.array([3, 3, 7, ROWS - 1 - rank, 0, 11], np.int64),
            dense_shape=[4, 3])
        wts = V1.SparseTensorValue(sp.indices, np.array(
            [1.0, 2.0, 0.5, 1.5, 1.0, 3.0], np.float32), sp.dense_shape)

        def lookups(table):
            ids = V1.sparse_placeholder(tf.int64)
            weights = V1.sparse_placeholder(tf.float32)
            a = tf.nn.embedding_lookup_sparse(table, ids, weights,
                                              combiner="mean")
            b = tf.nn.safe_embedding_lookup_sparse(table, ids, None,
                                                   combiner="sqrtn")
            return [a, b], {ids: sp, weights: wts}

        with tf.Graph().as_default():
            out, feed = lookups(tf.constant(table0()))
            with V1.Session() as sess:
                expected = sess.run(out, feed)
        with tf.Graph().as_default():
            with hb.scope(), hb.embedding_scope():
                table = V1.get_variable("emb", initializer=tf.constant(
                    table0()))
            out, feed = lookups(table)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                got = sess.run(out, feed)
        for g, e, n in zip(got, expected, ["lookup_sparse", "safe_sparse"]):
            close(g, e, n)

    def v1_small_table_replicated():
        """A table below emb_min_rows_to_shard stays a plain, full,
        data-parallel variable."""
        make = lambda: V1.train.GradientDescentOptimizer(LR)  # noqa: E731
        with tf.Graph().as_default():
            with hb.scope(emb_min_rows_to_shard=ROWS + 1):
                with hb.embedding_scope():
                    table = V1.get_variable("emb", initializer=tf.constant(
                        table0()))
                check(not is_sharded(table) and table.shape == (ROWS, DIM),
                      "small table sharded: %s" % (table.shape,))
                w, b = [V1.get_variable(n, initializer=tf.constant(v))
                        for n, v in zip("wb", dense0())]
                ids = V1.placeholder(tf.int64, (None, HOT))
                y = V1.placeholder(tf.float32, (None, 1))
                train = make().minimize(mse(table, w, b, ids, y))
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(STEPS):
                    sess.run(train, dict(zip((ids, y), batch(k, rank))))
                got = sess.run(table)
        # Replicated tables average the gradient of each rank's batch.
        full, _, _ = v1_expected(make, ranks)
        close(got, full, "replicated table", rtol=1e-4, atol=1e-5)

    def v1_out_of_range_id():
        """The rank that looks up a bad id gets InvalidArgumentError naming
        the table and the id; the other ranks' lookup completes."""
        with tf.Graph().as_default():
            with hb.scope(), hb.embedding_scope():
                table = V1.get_variable("bad_table", initializer=tf.constant(
                    table0()))
            ids = V1.placeholder(tf.int64, (None,))
            out = tf.nn.embedding_lookup(table, ids)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                if rank == size - 1:
                    expect_raises(lambda: sess.run(out, {ids: [1, ROWS + 5]}),
                                  tf.errors.InvalidArgumentError,
                                  "bad_table")
                    expect_raises(lambda: sess.run(out, {ids: [-2]}),
                                  tf.errors.InvalidArgumentError, "-2")
                else:
                    got = sess.run(out, {ids: [1, 2]})
                    close(got, table0()[[1, 2]], "good lookup")
                    got = sess.run(out, {ids: [0]})
                    close(got, table0()[[0]], "good lookup")
        hbcore.barrier()  # every rank is still in step with the others

    def tf2_model():
        with hb.embedding_scope():
            table = V1.get_variable(
                "emb_tf2", shape=[ROWS, DIM],
                initializer=V1.constant_initializer(table0()))
        w, b = [tf.Variable(v) for v in dense0()]
        return table, w, b

    def tf2_expected(make_opt, ranks_with_data):
        table = tf.Variable(table0())
        w, b = [tf.Variable(v) for v in dense0()]
        opt = make_opt()
        for k in range(STEPS if ranks_with_data else 0):
            ids, y = whole_batch(k, ranks_with_data)
            with tf.GradientTape() as tape:
                loss = mse(table, w, b, ids, y)
            opt.apply_gradients(zip(tape.gradient(loss, [table, w, b]),
                                    [table, w, b]))
        return table.numpy(), w.numpy(), b.numpy()

    def keras():
        from hbcore_tf._base import compat as _compat
        return _compat.keras_module()

    def tf_function_keras_sgd():
        """A Keras SGD made in hb.scope, stepping in a tf.function."""
        make = lambda: keras().optimizers.SGD(LR)  # noqa: E731
        with hb.scope():
            table, w, b = tf2_model()
            opt = make()

        @tf.function
        def step(ids, y):
            with tf.GradientTape() as tape:
                loss = mse(table, w, b, ids, y)
            variables = [table, w, b]
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        for k in range(STEPS):
            step(*batch(k, rank))
        full, ew, _ = tf2_expected(make, ranks)
        check_shard(table.numpy(), shard_info(table), full, "table rows")
        close(w.numpy(), ew, "w")

    def eager_tape():
        """Horovod's DistributedGradientTape, eagerly: the table's gradient
        is not allreduced, the dense ones are."""
        table, w, b = tf2_model()
        variables = [table, w, b]
        for k in range(STEPS):
            ids, y = batch(k, rank)
            with tf.GradientTape() as tape:
                loss = mse(table, w, b, ids, y)
            grads = hb.DistributedGradientTape(tape).gradient(loss, variables)
            check(isinstance(grads[0], tf.IndexedSlices),
                  "table gradient %s" % type(grads[0]))
            for v, g in zip(variables, grads):
                v.assign_sub(LR * tf.convert_to_tensor(g))
        full, ew, eb = tf2_expected(lambda: keras().optimizers.SGD(LR), ranks)
        check_shard(table.numpy(), shard_info(table), full, "table rows")
        close(w.numpy(), ew, "w")
        close(b.numpy(), eb, "b")

    def empty_batch_data_sync():
        """The last rank joins every step with an empty batch (data sync's
        step weight 0): the step's gradient is the average over the ranks
        with data, for the sharded table as for the dense weights, and the
        empty rank still serves its rows. (At one rank no rank has data:
        nothing changes.)"""
        make = lambda: keras().optimizers.SGD(LR)  # noqa: E731
        with hb.scope():
            table, w, b = tf2_model()
            opt = make()
        empty = rank == size - 1
        for k in range(STEPS):
            ids, y = batch(k, rank)
            if empty:
                ids, y = ids[:0], y[:0]
            with _step_weight.using(_step_weight.batch_weight(ids)):
                with tf.GradientTape() as tape:
                    loss = mse(table, w, b, ids, y)
                variables = [table, w, b]
                opt.apply_gradients(zip(tape.gradient(loss, variables),
                                        variables))
        full, ew, _ = tf2_expected(make, ranks[:-1])
        check_shard(table.numpy(), shard_info(table), full, "table rows")
        close(w.numpy(), ew, "w")

    def v1_data_sync_unbalanced():
        """hb.data.make_one_shot_iterator with data_sync_drop_remainder
        False under MonitoredTrainingSession: rank r holds r + 1 batches;
        ranks out of data join the later steps with empty batches (and
        still serve their rows) until every rank is out. Step k's expected
        update is single-process training on the batches of the ranks that
        still had data at step k."""
        steps = size
        batches = {r: [batch(k, r) for k in range(r + 1)] for r in ranks}

        def rank_dataset():
            ids = np.concatenate([b[0] for b in batches[rank]])
            ys = np.concatenate([b[1] for b in batches[rank]])
            return tf.data.Dataset.from_tensor_slices((ids, ys)).batch(BATCH)

        make = lambda: V1.train.AdagradOptimizer(LR)  # noqa: E731
        step_batches = []
        for k in range(steps):
            have = [r for r in ranks if k < len(batches[r])]
            step_batches.append(
                (np.concatenate([batches[r][k][0] for r in have]),
                 np.concatenate([batches[r][k][1] for r in have])))
        expected = v1_reference(make, step_batches)[:2]
        taken = 0
        with tf.Graph().as_default():
            with hb.scope(data_sync_drop_remainder=False):
                it = hb.data.make_one_shot_iterator(rank_dataset())
                bi, by = it.get_next()
                with hb.embedding_scope():
                    table = V1.get_variable("emb", initializer=tf.constant(
                        table0()))
                w, b = [V1.get_variable(n, initializer=tf.constant(v))
                        for n, v in zip("wb", dense0())]
                train = make().minimize(mse(table, w, b, bi, by))
            fetch = FetchAtEnd([table, w])
            with hb.train.MonitoredTrainingSession(
                    hooks=[fetch], log_step_count_steps=None) as sess:
                while not sess.should_stop():
                    sess.run(train)
                    taken += 1
            got = fetch.values
        check(taken == steps, "rank %d took %d steps, expected %d" % (
            rank, taken, steps))
        check_shard(got[0], shard_info(table), expected[0], "table rows",
                    rtol=1e-4, atol=1e-5)
        close(got[1], expected[1], "w", rtol=1e-4, atol=1e-5)

    table = {
        "v1_sgd": v1_case(lambda: V1.train.GradientDescentOptimizer(LR)),
        "v1_adagrad": v1_case(lambda: hb.train.AdagradOptimizer(LR), 1),
        "v1_adam": v1_case(lambda: V1.train.AdamOptimizer(LR), 2),
        "v1_ftrl": v1_case(lambda: V1.train.FtrlOptimizer(LR), 2),
        "v1_two_tables": v1_two_tables,
        "v1_not_unique": v1_option_case(emb_unique=False),
        "v1_wire_float16": v1_option_case(emb_wire_dtype="float16"),
        "v1_lookup_sparse": v1_lookup_sparse,
        "v1_small_table_replicated": v1_small_table_replicated,
        "v1_out_of_range_id": v1_out_of_range_id,
        "tf_function_keras_sgd": tf_function_keras_sgd,
        "eager_tape": eager_tape,
        "empty_batch_data_sync": empty_batch_data_sync,
        "v1_data_sync_unbalanced": v1_data_sync_unbalanced,
    }
    run_table(checker, table, CASES)
    check_options_restored = options.sharding is False
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "sharding_off_after": check_options_restored})
    hb.shutdown()


class FetchAtEnd(V1.train.SessionRunHook):
    """Reads tensors when the session ends (after the last step)."""

    def __init__(self, tensors):
        self.tensors, self.values = tensors, None

    def end(self, session):
        self.values = session.run(self.tensors)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
