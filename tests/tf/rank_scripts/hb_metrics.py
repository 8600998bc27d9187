"""hb.metrics, hb.keras.metrics and hb.train.EvaluationHook cases.

Every rank holds its own rank-seeded examples, a different number per rank.
Expected values are computed on every rank from ALL ranks' examples
(regenerated locally from the seeds, never through hbcore): with TF's own
single-process tf.compat.v1.metrics / Keras metrics on the concatenated
examples, with a numpy confusion-count AUC at the same thresholds, and
with the exact rank-statistic (Mann-Whitney) AUC. Run by
tests/tf/test_hb_metrics.py, with Keras 3 or tf_keras
(TF_USE_LEGACY_KERAS=1; only the keras/* cases then).
"""
import os

import numpy as np

from common import OUT_DIR
from train_common import (Checker, check, close, expect_raises, report,
                          run_table, tf)

import hbcore_tf as hb  # noqa: E402
import hbcore_tf.metrics as hb_metrics  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402
from hbcore_tf.keras import metrics as hb_keras_metrics  # noqa: E402
from hbcore_tf.train.evaluation import EvaluationHook  # noqa: E402

keras = _compat.keras_module()

CURVES = [("ROC", "trapezoidal"), ("ROC", "minoring"), ("ROC", "majoring"),
          ("PR", "trapezoidal"), ("PR", "careful_interpolation")]
CASES = [
    "v1/auc/ROC/trapezoidal", "v1/auc/ROC/minoring", "v1/auc/ROC/majoring",
    "v1/auc/PR/trapezoidal", "v1/auc/PR/careful_interpolation",
    "v1/auc/weighted", "v1/auc/numpy-thresholds", "v1/auc/rank-statistic",
    "v1/accuracy", "v1/accuracy/weighted", "v1/mean/weighted",
    "v1/update-op-is-local", "v1/collections", "v1/errors",
    "v1/eager-raises", "eval-hook", "keras/evaluate",
    "keras/fit-identical-on-ranks",
]
KERAS_CASES = ["keras/evaluate", "keras/fit-identical-on-ranks"]


def examples(rank: int):
    n = 60 + 37 * rank
    rng = np.random.default_rng([11, rank])
    labels = rng.integers(0, 2, size=n)
    scores = np.clip(0.35 * labels + 0.65 * rng.uniform(size=n), 0, 1)
    weights = rng.uniform(0.1, 2.0, size=n)
    return labels, scores.astype(np.float32), weights


def gathered(size: int):
    parts = [examples(r) for r in range(size)]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def run_v1(build, feed):
    """Builds metrics in a fresh graph, runs update then value."""
    with tf.Graph().as_default():
        value, update = build(*feed)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            local = sess.run(update)
            return sess.run(value), local


def numpy_roc_auc(labels, scores, weights, num_thresholds=200):
    eps = 1e-7
    thresholds = np.array([-eps] + [(i + 1) / (num_thresholds - 1) for i in
                                    range(num_thresholds - 2)] + [1 + eps])
    above = scores[:, None].astype(np.float32) > thresholds[None, :].astype(
        np.float32)
    pos, neg = weights * (labels > 0), weights * (labels == 0)
    tp, fp = (above * pos[:, None]).sum(0), (above * neg[:, None]).sum(0)
    fn, tn = pos.sum() - tp, neg.sum() - fp
    tpr = (tp + 1e-6) / (tp + fn + 1e-6)
    fpr = fp / (fp + tn + 1e-6)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def mann_whitney_auc(labels, scores):
    pos, neg = scores[labels > 0], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


class Cases:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.mine = examples(rank)
        self.all = gathered(size)

    def auc_curve(self, curve, method):
        got, _ = run_v1(lambda l, s: hb_metrics.auc(
            l, s, curve=curve, summation_method=method), self.mine[:2])
        want, _ = run_v1(lambda l, s: tf.compat.v1.metrics.auc(
            l, s, curve=curve, summation_method=method), self.all[:2])
        close(got, want, "%s/%s auc" % (curve, method), rtol=1e-5)

    def auc_weighted(self):
        got, _ = run_v1(lambda l, s, w: hb_metrics.auc(l, s, weights=w,
                                                       num_thresholds=50),
                        self.mine)
        want, _ = run_v1(lambda l, s, w: tf.compat.v1.metrics.auc(
            l, s, weights=w, num_thresholds=50), self.all)
        close(got, want, "weighted auc", rtol=1e-5)

    def auc_numpy_thresholds(self):
        got, _ = run_v1(lambda l, s, w: hb_metrics.auc(l, s, weights=w),
                        self.mine)
        close(got, numpy_roc_auc(*self.all), "auc vs numpy counts",
              rtol=1e-5)

    def auc_rank_statistic(self):
        got, _ = run_v1(hb_metrics.auc, self.mine[:2])
        exact = mann_whitney_auc(*self.all[:2])
        check(abs(float(got) - exact) < 0.01,
              "auc %f vs exact %f" % (got, exact))

    def accuracy(self, weighted):
        labels, scores, weights = self.mine
        feed = (labels, (scores > 0.5).astype(np.int64)) + (
            (weights,) if weighted else ())
        got, local = run_v1(hb_metrics.accuracy, feed)
        all_l, all_s, all_w = self.all
        correct = (all_s > 0.5).astype(np.int64) == all_l
        w = all_w if weighted else np.ones_like(all_w)
        close(got, np.sum(correct * w) / np.sum(w), "global accuracy")
        mine_correct = (scores > 0.5).astype(np.int64) == labels
        mw = weights if weighted else np.ones_like(weights)
        close(local, np.sum(mine_correct * mw) / np.sum(mw), "local accuracy")

    def mean_weighted(self):
        _, scores, weights = self.mine
        got, _ = run_v1(hb_metrics.mean, (scores, weights))
        _, all_s, all_w = self.all
        close(got, np.sum(all_s * all_w) / np.sum(all_w), "weighted mean")

    def update_is_local(self):
        _, local = run_v1(hb_metrics.auc, self.mine[:2])
        want, _ = run_v1(tf.compat.v1.metrics.auc, self.mine[:2])
        close(local, want, "update_op value is this rank's own auc")

    def collections(self):
        with tf.Graph().as_default():
            value, update = hb_metrics.auc(
                self.mine[0], self.mine[1], metrics_collections=["m"],
                updates_collections=["u"], name="my_auc")
            check(tf.compat.v1.get_collection("m") == [value], "metrics coll")
            check(tf.compat.v1.get_collection("u") == [update], "updates coll")
            local = tf.compat.v1.get_collection(
                tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
            check(len(local) == 4 and all(v.name.startswith("my_auc/")
                                          for v in local),
                  "local variables %s" % [v.name for v in local])
            check(not tf.compat.v1.trainable_variables(), "trainable vars")
            check(set(tf.compat.v1.get_collection(
                tf.compat.v1.GraphKeys.METRIC_VARIABLES)) == set(local),
                "metric variables")

    def errors(self):
        with tf.Graph().as_default():
            expect_raises(lambda: hb_metrics.auc([1], [0.5], curve="XY"),
                          ValueError, "curve")
            expect_raises(lambda: hb_metrics.auc(
                [1], [0.5], summation_method="simpson"), ValueError,
                "summation_method")
            expect_raises(lambda: hb_metrics.auc([1], [0.5], num_thresholds=1),
                          ValueError, "num_thresholds")

    def eager_raises(self):
        for fn in (lambda: hb_metrics.auc([1], [0.5]),
                   lambda: hb_metrics.accuracy([1], [1]),
                   lambda: hb_metrics.mean([1.0])):
            expect_raises(fn, RuntimeError, "eager execution")

    def eval_hook(self):
        """7 training steps, evaluation every 3 (and at the end) over 2 batches of 16 of each
        rank's examples (the iterator is re-initialized per evaluation)."""
        summary_dir = os.path.join(OUT_DIR, "eval-summaries-%d" % self.rank)
        history = []
        with tf.Graph().as_default():
            step = tf.compat.v1.train.get_or_create_global_step()
            train_op = step.assign_add(1)

            def eval_fn():
                ds = tf.data.Dataset.from_tensor_slices(self.mine[:2]).batch(16)
                it = tf.compat.v1.data.make_initializable_iterator(ds)
                labels, scores = it.get_next()
                return {"auc": hb_metrics.auc(labels, scores),
                        "score_mean": hb_metrics.mean(scores)}

            hook = EvaluationHook(eval_fn, steps=2, every_n_iter=3,
                                  summary_dir=summary_dir, history=history)
            with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
                for _ in range(7):
                    sess.run(train_op)
        check([h["step"] for h in history] == [3, 6, 7],
              "evaluated at %s" % [h["step"] for h in history])
        parts = [examples(r) for r in range(self.size)]
        labels = np.concatenate([p[0][:32] for p in parts])
        scores = np.concatenate([p[1][:32] for p in parts])
        want, _ = run_v1(tf.compat.v1.metrics.auc, (labels, scores))
        for entry in history:
            close(entry["auc"], want, "hook auc", rtol=1e-5)
            close(entry["score_mean"], scores.mean(), "hook mean", rtol=1e-5)
        files = os.listdir(summary_dir) if os.path.isdir(summary_dir) else []
        if self.rank != 0:
            check(not files, "rank %d wrote summaries" % self.rank)
            return
        tags = {}
        for name in files:
            for event in tf.compat.v1.train.summary_iterator(
                    os.path.join(summary_dir, name)):
                for value in event.summary.value:
                    tags.setdefault(value.tag, []).append(
                        (event.step, value.simple_value))
        check(sorted(s for s, _ in tags.get("auc", [])) == [3, 6, 7],
              "summaries %s" % tags)
        close([v for _, v in tags["auc"]], [want] * 3, "summary auc",
              rtol=1e-5)

    def _model(self):
        inputs = keras.Input(shape=(1,))
        outputs = keras.layers.Dense(1, activation="sigmoid")(inputs)
        model = keras.Model(inputs, outputs)
        model.set_weights([np.array([[2.0]], np.float32),
                           np.array([-1.0], np.float32)])
        return model

    def keras_evaluate(self):
        labels, scores, _ = self.mine
        model = self._model()
        model.compile(loss="binary_crossentropy", metrics=[
            hb_keras_metrics.AUC(name="auc"),
            hb_keras_metrics.BinaryAccuracy(name="acc")])
        got = model.evaluate(scores[:, None], labels[:, None].astype(
            np.float32), batch_size=16, verbose=0, return_dict=True)
        all_l, all_s, _ = self.all
        probs = self._model().predict(all_s[:, None], verbose=0)
        auc = keras.metrics.AUC()
        auc.update_state(all_l[:, None], probs)
        acc = keras.metrics.BinaryAccuracy()
        acc.update_state(all_l[:, None].astype(np.float32), probs)
        close(got["auc"], float(auc.result()), "keras global auc", rtol=1e-5)
        close(got["acc"], float(acc.result()), "keras global accuracy")

    def keras_fit(self):
        import hbcore

        labels, scores, _ = self.mine
        model = self._model()
        model.compile(optimizer=keras.optimizers.SGD(0.0),
                      loss="binary_crossentropy",
                      metrics=[hb_keras_metrics.AUC(name="auc")])
        steps = 3  # the same number of steps on every rank
        history = model.fit(scores[:48, None], labels[:48, None].astype(
            np.float32), batch_size=16, epochs=2, verbose=0)
        check(len(history.history["auc"]) == 2, "epochs")
        aucs = hbcore.allgather_object(history.history["auc"])
        check(all(a == aucs[0] for a in aucs),
              "per-epoch auc differs between ranks: %s" % aucs)
        parts = [examples(r) for r in range(self.size)]
        all_l = np.concatenate([p[0][:16 * steps] for p in parts])
        all_s = np.concatenate([p[1][:16 * steps] for p in parts])
        probs = self._model().predict(all_s[:, None], verbose=0)
        auc = keras.metrics.AUC()
        auc.update_state(all_l[:, None], probs)
        close(aucs[0][-1], float(auc.result()), "fit auc (lr 0)", rtol=1e-5)


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    c = Cases(rank, size)
    table = {"v1/auc/%s/%s" % cm: (lambda cm=cm: c.auc_curve(*cm))
             for cm in CURVES}
    table.update({
        "v1/auc/weighted": c.auc_weighted,
        "v1/auc/numpy-thresholds": c.auc_numpy_thresholds,
        "v1/auc/rank-statistic": c.auc_rank_statistic,
        "v1/accuracy": lambda: c.accuracy(False),
        "v1/accuracy/weighted": lambda: c.accuracy(True),
        "v1/mean/weighted": c.mean_weighted,
        "v1/update-op-is-local": c.update_is_local,
        "v1/collections": c.collections,
        "v1/errors": c.errors,
        "v1/eager-raises": c.eager_raises,
        "eval-hook": c.eval_hook,
        "keras/evaluate": c.keras_evaluate,
        "keras/fit-identical-on-ranks": c.keras_fit,
    })
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    skip = [n for n in CASES if n not in KERAS_CASES] if legacy else []
    run_table(checker, table, CASES, skip=skip)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hb.shutdown()


if __name__ == "__main__":
    main()
