"""HybridBackend parity of hb.train.monitored_session and hb.data:

- ``hb.train.monitored_session(**kwargs)`` and
  ``hb.train.Server.get().monitored_session(**kwargs)``, the session
  HybridBackend's own tests and examples open (hbcore had only
  ``hb.train.MonitoredTrainingSession``: AttributeError);
- ``hb.data.make_one_shot_iterator`` in a script that never called init()
  (HybridBackend's Parquet tests do so; hbcore raised ValueError "hbcore is
  not initialized"): the first case runs before anything initializes hbcore;
- ``hb.data.ParquetDataset.read_schema(filename, fields=None, lower=False)``
  (HybridBackend's classmethod; AttributeError);
- ``ds.apply(hb.data.to_sparse())`` (HybridBackend's transformation form,
  used by its Criteo example; TypeError: missing 'features').

Every rank starts from DIFFERENT initial values (seeded by its rank) and
its own data, so the broadcast from rank 0 and the gradient averaging are
part of what is tested; expected values are computed with numpy from rank
0's initial values and the mean of every rank's gradient. Run by
tests/tf/test_hb_train_monitored_session.py (the launch, the
monitored_session and server cases) and tests/tf/test_hb_parquet.py (the
data and parquet cases), which share one launch per rank count.
"""
import os
import tempfile

import numpy as np

from train_common import (check, close, env_rank, env_size, expect_raises,
                          list_rows, rank_values, report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402

V1 = tf.compat.v1
CASES = [
    "data/iterator-initializes-hbcore",
    "parquet/read-schema",
    "parquet/to-sparse-transformation",
    "monitored_session/gradient-descent-in-scope",
    "monitored_session/adam-in-function",
    "monitored_session/arguments",
    "server/monitored_session",
    "monitored_session/eval-without-fn-raises",
]
SHAPE = (4, 3)


def init(rank):
    return rank_values(11, rank, SHAPE)


def data(rank):
    return rank_values(12, rank, SHAPE)


def mean_data(size):
    return np.mean([data(r).astype(np.float64) for r in range(size)], axis=0)


def build(rank, make_opt):
    """v (rank's own init), loss = sum(v * x_rank): gradient x_rank."""
    v = V1.get_variable("v0", initializer=tf.constant(init(rank)))
    loss = tf.reduce_sum(v * tf.constant(data(rank)))
    step = V1.train.get_or_create_global_step()
    return v, loss, make_opt().minimize(loss, global_step=step)


class Cases:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def iterator_initializes_hbcore(self):
        # Runs first: nothing has initialized hbcore yet.
        check(not hbcore.is_initialized(),
              "hbcore initialized before the case")
        with tf.Graph().as_default():
            # Rank r holds 10 + 5 r numbers: rank 0's 2 batches set the
            # step count (drop_remainder default True) on every rank.
            ds = tf.data.Dataset.range(10 + 5 * self.rank).batch(5)
            batch = hb.data.make_one_shot_iterator(ds).get_next()
            check(hbcore.is_initialized(), "hbcore not initialized")
            check(hb.size() == self.size and hb.rank() == self.rank,
                  "rank %d of %d" % (hb.rank(), hb.size()))
            got = []
            with V1.Session() as sess:
                while True:
                    try:
                        got.append(sess.run(batch))
                    except tf.errors.OutOfRangeError:
                        break
        check(len(got) == 2, "%d batches, expected 2" % len(got))
        close(np.stack(got), np.arange(10).reshape(2, 5), "batches")

    def parquet_to_sparse_transformation(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = 9 + self.rank
        ids = [[10 * i + j for j in range(i % 4)] for i in range(n)]
        label = np.arange(n, dtype=np.int64)
        path = os.path.join(tempfile.mkdtemp(prefix="hb_mts_data_"),
                            "s.parquet")
        pq.write_table(pa.table({
            "ids": pa.array(ids, pa.list_(pa.int64())), "label": label}), path)
        want_idx = [[i, j] for i, row in enumerate(ids)
                    for j in range(len(row))]
        want_val = [v for row in ids for v in row]
        forms = {
            "to_sparse()": lambda ds: ds.apply(hb.data.to_sparse()),
            "to_sparse(num_parallel_calls=2)":
                lambda ds: ds.apply(hb.data.to_sparse(num_parallel_calls=2)),
            "to_sparse(2)": lambda ds: ds.apply(hb.data.to_sparse(2)),
            "map(to_sparse)": lambda ds: ds.map(hb.data.to_sparse),
        }
        for what, form in forms.items():
            with tf.Graph().as_default():
                ds = form(hb.data.ParquetDataset(path, batch_size=n))
                check(isinstance(ds.element_spec["ids"], tf.SparseTensorSpec),
                      "%s: ids spec %r" % (what, ds.element_spec["ids"]))
                element = V1.data.make_one_shot_iterator(ds).get_next()
                with V1.Session() as sess:
                    got = sess.run(element)
            close(got["ids"].indices, want_idx, what + " indices")
            close(got["ids"].values, want_val, what + " values")
            close(got["ids"].dense_shape, [n, 3], what + " dense_shape")
            close(got["label"], label, what + " label")

    def parquet_read_schema(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = 7 + self.rank
        label = np.arange(n, dtype=np.int32) % 2
        score = np.linspace(0, 1, n)
        ids = [list(range(i % 3)) for i in range(n)]
        path = os.path.join(tempfile.mkdtemp(prefix="hb_mts_data_"),
                            "f.parquet")
        pq.write_table(pa.table({
            "label": label, "score": score,
            "ids": pa.array(ids, pa.list_(pa.int64())),
            "name": ["u%d" % i for i in range(n)]}), path)
        Field = hb.data.DataFrame.Field  # noqa: N806
        every = hb.data.ParquetDataset.read_schema(path)
        check([(f.name, f.dtype, f.ragged_rank) for f in every] == [
            ("label", tf.int32, 0), ("score", tf.float64, 0),
            ("ids", tf.int64, 1), ("name", tf.string, 0)],
            "read_schema(path): %r" % (every,))
        typed = hb.data.ParquetDataset.read_schema(
            path, ["LABEL", Field("IDS", tf.int32)], lower=True)
        check([(f.name, f.dtype, f.ragged_rank) for f in typed] == [
            ("label", tf.int32, 0), ("ids", tf.int32, 1)],
            "read_schema(lower=True): %r" % (typed,))
        expect_raises(lambda: hb.data.ParquetDataset.read_schema(
            path, ["LABEL"]), ValueError, "column 'LABEL' is not in")
        expect_raises(lambda: hb.data.ParquetDataset.read_schema(
            path, [Field("ids", ragged_rank=0)]), ValueError,
            "ragged_rank=0")
        # The typed Fields are what filenames given as a dataset need.
        with tf.Graph().as_default():
            ds = hb.data.ParquetDataset(
                tf.data.Dataset.from_tensors(path), batch_size=n,
                fields=typed)
            element = V1.data.make_one_shot_iterator(ds).get_next()
            with V1.Session() as sess:
                got = sess.run(element)
        close(got["label"], label, "label column")
        check(list_rows(got["ids"]) == ids, "ids column %r" % (got["ids"],))
        check(got["ids"].values.dtype == np.int32, "ids cast to int32")

    def gradient_descent_in_scope(self):
        lr = 0.5
        with tf.Graph().as_default():
            with hb.scope():
                v, _, train_op = build(
                    self.rank,
                    lambda: V1.train.GradientDescentOptimizer(lr))
                with hb.train.monitored_session() as sess:
                    before = sess.run(v)
                    sess.run(train_op)
                    sess.run(train_op)
                    after = sess.run(v)
        close(before, init(0), "v after the session's broadcast")
        close(after, init(0) - 2 * lr * mean_data(self.size),
              "v after 2 averaged SGD steps", rtol=1e-5, atol=1e-5)

    def adam_in_function(self):
        lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-8

        @hb.function()
        def model_fn():
            v, _, train_op = build(self.rank,
                                   lambda: V1.train.AdamOptimizer(lr))
            return v, train_op

        with tf.Graph().as_default():
            v, train_op = model_fn()
            with hb.train.monitored_session() as sess:
                for _ in range(3):
                    sess.run(train_op)
                got = sess.run(v)
        g = mean_data(self.size)
        w = init(0).astype(np.float64)
        m = np.zeros_like(w)
        s = np.zeros_like(w)
        for t in range(1, 4):
            m = b1 * m + (1 - b1) * g
            s = b2 * s + (1 - b2) * g * g
            lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            w = w - lr_t * m / (np.sqrt(s) + eps)
        close(got, w, "v after 3 averaged Adam steps", rtol=1e-5, atol=1e-5)

    def arguments(self):
        # HybridBackend's example passes hooks, checkpoint_dir,
        # save_checkpoint_steps, eval_fn and eval_every_n_iter.
        lr = 0.25
        root = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_mts_data_") if self.rank == 0
            else None, root_rank=0)
        ckpt_dir = os.path.join(root, "ckpt")
        history = []
        with tf.Graph().as_default():
            v, _, train_op = build(
                self.rank, lambda: hb.train.GradientDescentOptimizer(lr))

            def eval_fn():
                x = V1.get_variable("v0")
                return {"vsum": hb.metrics.mean(tf.reduce_sum(x))}

            steps = 0
            with hb.train.monitored_session(
                    hooks=[V1.train.StopAtStepHook(last_step=3)],
                    checkpoint_dir=ckpt_dir, save_checkpoint_steps=1,
                    eval_fn=eval_fn, eval_every_n_iter=2, eval_steps=1,
                    eval_history=history) as sess:
                while not sess.should_stop():
                    sess.run(train_op)
                    steps += 1
        check(steps == 3, "StopAtStepHook(3) ran %d steps" % steps)
        expected = init(0) - 3 * lr * mean_data(self.size)
        # Evaluations after step 2 and once more at the end (step 3).
        check([h["step"] for h in history] == [2, 3],
              "evaluation steps %r" % [h["step"] for h in history])
        close(history[-1]["vsum"], expected.sum(), "final evaluation",
              rtol=1e-5, atol=1e-5)
        hbcore.barrier()
        latest = V1.train.latest_checkpoint(ckpt_dir)
        check(latest is not None and latest.endswith("model.ckpt-3"),
              "latest checkpoint %r" % latest)
        close(tf.train.load_variable(latest, "v0"), expected,
              "checkpointed v0", rtol=1e-5, atol=1e-5)
        hbcore.barrier()

    def server_monitored_session(self):
        server = hb.train.Server.get()
        check(server is hb.train.Server.get(), "Server.get() is one server")
        check(server.target == "", "target %r" % server.target)
        with tf.Graph().as_default():
            with hb.scope():
                v, _, train_op = build(
                    self.rank, lambda: V1.train.GradientDescentOptimizer(1.0))
                with server.monitored_session() as sess:
                    sess.run(train_op)
                    got = sess.run(v)
        close(got, init(0) - mean_data(self.size), "v after one step",
              rtol=1e-5, atol=1e-5)

    def eval_without_fn_raises(self):
        with tf.Graph().as_default():
            build(self.rank, lambda: hb.train.GradientDescentOptimizer(1.0))
            expect_raises(
                lambda: hb.train.monitored_session(eval_every_n_iter=2),
                ValueError, "eval_every_n_iter is given but eval_fn is None")


def main():
    tf.compat.v1.disable_eager_execution()
    # No hb.init() before the first case (data/iterator-initializes-hbcore).
    rank, size = env_rank(), env_size()
    from common import Checker

    checker = Checker(rank)
    c = Cases(rank, size)
    table = {
        "data/iterator-initializes-hbcore": c.iterator_initializes_hbcore,
        "parquet/read-schema": c.parquet_read_schema,
        "parquet/to-sparse-transformation": c.parquet_to_sparse_transformation,
        "monitored_session/gradient-descent-in-scope":
            c.gradient_descent_in_scope,
        "monitored_session/adam-in-function": c.adam_in_function,
        "monitored_session/arguments": c.arguments,
        "server/monitored_session": c.server_monitored_session,
        "monitored_session/eval-without-fn-raises": c.eval_without_fn_raises,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
