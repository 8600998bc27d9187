"""hb.train.EvaluationHook / MonitoredTrainingSession(eval_fn=...) cases.

Each rank evaluates its own rank-seeded rows (a different number per
rank); expected values are computed on every rank from all ranks' rows
with numpy (never through hbcore). Run by tests/tf/test_train_hooks.py
under hbrun at 2 and 3 ranks.
"""
import os
import tempfile

import numpy as np

from common import OUT_DIR
from train_common import (Checker, check, close, expect_raises, report,
                          run_table, rank_values, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore_tf.train.evaluation import EvaluationHook  # noqa: E402

V1 = tf.compat.v1
CASES = ["reuse_model_variables", "metric_names_not_shared",
         "vector_metric", "second_session", "mts_keep_checkpoint_max",
         "mts_broadcasts_hook_variables"]
W0 = np.array([[0.5], [-1.0], [2.0]], np.float32)
B0 = 0.25
LR = 0.5


def eval_rows(rank: int) -> np.ndarray:
    return rank_values(500, rank, (4 + 3 * rank, 3))


def model(x):
    """HybridBackend's tutorial style: variables by name (get_variable,
    nested variable scopes), built once for training and again in
    eval_fn."""
    w = V1.get_variable("w", initializer=W0)
    b = V1.get_variable("b", initializer=np.float32(B0))
    hidden = tf.matmul(x, w) + b
    with V1.variable_scope("out"):
        kernel = V1.get_variable("kernel", initializer=np.float32([[2.0]]))
        bias = V1.get_variable("bias", [1], initializer=V1.zeros_initializer())
    return tf.matmul(hidden, kernel) + bias


def batch_sums(rank: int) -> np.ndarray:
    """The mean over this rank's eval batches (of 2 rows) of each batch's
    column sums: what mean_tensor(reduce_sum(x, 0)) computes."""
    rows = eval_rows(rank)
    return np.mean([rows[i:i + 2].sum(axis=0)
                    for i in range(0, len(rows), 2)], axis=0)


def eval_batches(rank: int):
    ds = tf.data.Dataset.from_tensor_slices(eval_rows(rank)).batch(2)
    return V1.data.make_initializable_iterator(ds).get_next()


def main():
    rank, size = hb.context.rank, hb.context.world_size
    checker = Checker(rank)
    everyone = np.concatenate([eval_rows(r) for r in range(size)])

    def reuse_model_variables():
        """eval_fn rebuilds the model: it must evaluate the trained
        variables (HybridBackend runs fn under AUTO_REUSE), not raise
        "Variable w already exists" or build an untrained copy."""
        history = []
        with tf.Graph().as_default():
            step = V1.train.get_or_create_global_step()
            train_x = tf.constant(rank_values(501, rank, (2, 3)))
            model(train_x)
            w = [v for v in V1.global_variables() if v.op.name == "w"][0]
            train_op = tf.group(w.assign_add(tf.fill([3, 1], LR)),
                                step.assign_add(1))
            before = sorted(v.name for v in V1.global_variables())

            def eval_fn():
                return {"pred": hb.metrics.mean(model(eval_batches(rank)))}

            with hb.train.MonitoredTrainingSession(
                    eval_fn=eval_fn, eval_every_n_iter=2, eval_steps=100,
                    eval_history=history, log_step_count_steps=None,
                    save_summaries_steps=None) as sess:
                for _ in range(5):
                    sess.run(train_op)
            after = sorted(v.name for v in V1.global_variables())
        check(after == before, "eval_fn created global variables %s" %
              sorted(set(after) - set(before)))
        check([h["step"] for h in history] == [2, 4, 5],
              "evaluated at %s" % [h["step"] for h in history])
        for h in history:
            w_now = W0 + LR * h["step"]
            want = np.mean(2.0 * (everyone @ w_now + B0))
            close(h["pred"], want, "pred at step %d" % h["step"], rtol=1e-5)

    def metric_names_not_shared():
        """AUTO_REUSE must not hand eval_fn the training graph's metric
        state: an auto-named metric gets its own variables, and a clashing
        explicit name is an error, as without reuse."""
        history = []
        with tf.Graph().as_default():
            step = V1.train.get_or_create_global_step()
            train_values = tf.constant(rank_values(502, rank, (5,)))
            train_mean, train_update = hb.metrics.mean(train_values)
            hb.metrics.mean(train_values, name="taken")
            train_op = tf.group(train_update, step.assign_add(1))

            def eval_fn():
                x = eval_batches(rank)
                return {"mean": hb.metrics.mean(x)}

            # steps=None (HybridBackend): until the evaluation data ends.
            hook = EvaluationHook(eval_fn, steps=None, every_n_iter=2,
                                  history=history)
            with V1.train.MonitoredSession(hooks=[hook]) as sess:
                for _ in range(2):
                    sess.run(train_op)
                got_train = sess.run_step_fn(
                    lambda step_context: step_context.session.run(
                        train_mean))

            def clashing():
                with tf.Graph().as_default():
                    hb.metrics.mean(tf.ones([2]), name="taken")
                    clash = EvaluationHook(
                        lambda: {"m": hb.metrics.mean(tf.ones([2]),
                                                      name="taken")})
                    clash.begin()

            expect_raises(clashing, ValueError, "taken/")
            for bad in (0, -1, 2.5, True):
                expect_raises(lambda b=bad: EvaluationHook(eval_fn, steps=b),
                              ValueError, "steps must be a positive integer")
        close(history[0]["mean"], everyone.mean(), "eval mean", rtol=1e-5)
        train_all = np.concatenate([rank_values(502, r, (5,))
                                    for r in range(size)])
        close(got_train, train_all.mean(), "training metric after eval",
              rtol=1e-5)

    def vector_metric():
        """A metric whose value is an array (tf.compat.v1.metrics'
        mean_tensor): history keeps the array, rank 0 writes a tensor
        summary beside the scalar ones."""
        summary_dir = os.path.join(OUT_DIR, "eval-vector-%d" % rank)
        history = []
        with tf.Graph().as_default():
            step = V1.train.get_or_create_global_step()
            train_op = V1.assign_add(step, 1)

            def eval_fn():
                x = eval_batches(rank)
                return {"columns": V1.metrics.mean_tensor(
                            tf.reduce_sum(x, axis=0)),
                        "mean": hb.metrics.mean(x)}

            hook = EvaluationHook(eval_fn, steps=100, every_n_iter=2,
                                  summary_dir=summary_dir, history=history)
            with V1.train.MonitoredSession(hooks=[hook]) as sess:
                for _ in range(2):
                    sess.run(train_op)
        check(len(history) == 1, "history %r" % (history,))
        mine = batch_sums(rank)
        check(isinstance(history[0]["columns"], np.ndarray),
              "columns is %r" % (history[0]["columns"],))
        close(history[0]["columns"], mine, "columns")
        close(history[0]["mean"], everyone.mean(), "global mean", rtol=1e-5)
        files = os.listdir(summary_dir) if os.path.isdir(summary_dir) else []
        if rank != 0:
            check(not files, "rank %d wrote summaries" % rank)
            return
        tags = {}
        for name in files:
            for event in V1.train.summary_iterator(
                    os.path.join(summary_dir, name)):
                for value in event.summary.value:
                    tags[value.tag] = (event.step, value)
        check(set(tags) == {"columns", "mean"}, "tags %s" % sorted(tags))
        close(tf.make_ndarray(tags["columns"][1].tensor), mine,
              "columns summary")
        close(tags["mean"][1].simple_value, everyone.mean(), "mean summary",
              rtol=1e-5)
        check(tags["columns"][0] == 2, "summary step %d" % tags["columns"][0])

    def second_session():
        """One hook in two sessions: it counts every_n_iter from each
        session's start, as HybridBackend's hook does."""
        history = []

        def eval_fn():
            return {"mean": hb.metrics.mean(eval_batches(rank))}

        hook = EvaluationHook(eval_fn, steps=100, every_n_iter=3,
                              history=history)
        for _ in range(2):
            with tf.Graph().as_default():
                step = V1.train.get_or_create_global_step()
                train_op = V1.assign_add(step, 1)
                with V1.train.MonitoredSession(hooks=[hook]) as sess:
                    for _ in range(4):
                        sess.run(train_op)
        check([h["step"] for h in history] == [3, 4, 3, 4],
              "evaluated at global steps %s" % [h["step"] for h in history])
        for h in history:
            close(h["mean"], everyone.mean(), "mean", rtol=1e-5)

    def mts_keep_checkpoint_max():
        """HybridBackend's keep_checkpoint_max argument: rank 0 keeps the
        last 2 of the checkpoints written at steps 0..4."""
        ckpt = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_keep_") if rank == 0 else None, 0)
        with tf.Graph().as_default():
            step = V1.train.get_or_create_global_step()
            V1.get_variable("v", initializer=np.float32(rank))
            train_op = V1.assign_add(step, 1)
            with hb.train.MonitoredTrainingSession(
                    checkpoint_dir=ckpt, save_checkpoint_steps=1,
                    keep_checkpoint_max=2, save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                for _ in range(4):
                    sess.run(train_op)
        hbcore.barrier()
        state = V1.train.get_checkpoint_state(ckpt)
        kept = [os.path.basename(p) for p in
                state.all_model_checkpoint_paths]
        check(kept == ["model.ckpt-3", "model.ckpt-4"], "kept %s" % kept)
        index_files = sorted(f for f in os.listdir(ckpt)
                             if f.endswith(".index"))
        check(index_files == ["model.ckpt-3.index", "model.ckpt-4.index"],
              "files %s" % index_files)
        hbcore.barrier()

    def mts_broadcasts_hook_variables():
        """A global variable that a hook creates in begin() (after the
        session's own broadcast hook began) starts from rank 0's value
        too, before the next hook's after_create_session sees it."""
        seen = {}

        class MakesVariable(V1.train.SessionRunHook):
            def begin(self):
                self.var = V1.get_variable(
                    "made_by_hook", initializer=np.float32(10 + rank))

            def after_create_session(self, session, coord):
                seen["at_create"] = float(session.run(self.var))

        hook = MakesVariable()
        with tf.Graph().as_default():
            step = V1.train.get_or_create_global_step()
            train_op = V1.assign_add(step, 1)
            with hb.train.MonitoredTrainingSession(
                    hooks=[hook], save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                sess.run(train_op)
                after = sess.run_step_fn(
                    lambda step_context: step_context.session.run(hook.var))
        check(seen["at_create"] == 10.0 and float(after) == 10.0,
              "hook variable on rank %d: %r at creation, %r after a step"
              % (rank, seen["at_create"], float(after)))

    table = {"reuse_model_variables": reuse_model_variables,
             "metric_names_not_shared": metric_names_not_shared,
             "vector_metric": vector_metric,
             "second_session": second_session,
             "mts_keep_checkpoint_max": mts_keep_checkpoint_max,
             "mts_broadcasts_hook_variables": mts_broadcasts_hook_variables}
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
