"""hb.metrics cases: weights of a squeezable shape, and hb.metrics.gauc.

Every rank holds its own rank-seeded examples (a different number per
rank; the last rank's gauc batch is empty in "v1/gauc/empty-rank").
Expected values are computed on every rank from ALL ranks' examples
(regenerated locally from the seeds, never through hbcore) with numpy:
weighted accuracy / mean / confusion-count AUC, and for gauc the exact
rank-statistic AUC of each (rank, user) group weighted by its size.

No launch of its own: hb_metrics.py runs CASES (Cases) after its own cases,
in the same launch (tests/tf/test_hb_metrics.py asserts them).
"""
from typing import Callable, Dict, Tuple

import numpy as np

from train_common import check, close, expect_raises, tf

import hbcore_tf as hb  # noqa: E402
import hbcore_tf.metrics as hb_metrics  # noqa: E402

CASES = [
    "v1/weights/accuracy-labels-n1-weights-n1",
    "v1/weights/auc-predictions-n1-weights-n",
    "v1/weights/mean-values-n-weights-n1",
    "v1/gauc/users",
    "v1/gauc/two-columns",
    "v1/gauc/empty-rank",
    "v1/gauc/no-indicators",
    "v1/gauc/eager-raises",
    "v1/gauc/steps-soft-labels-collections",
    "v1/gauc/bad-input",
]


def examples(rank: int, empty: bool = False):
    """labels, scores (with ties), weights, user ids of one rank."""
    n = 0 if empty else 50 + 23 * rank
    rng = np.random.default_rng([29, rank])
    labels = rng.integers(0, 2, size=n)
    scores = np.round(np.clip(0.3 * labels + 0.7 * rng.uniform(size=n),
                              0, 1), 1).astype(np.float32)
    weights = rng.uniform(0.1, 2.0, size=n)
    users = rng.integers(0, 9, size=n).astype(np.int64)
    return labels, scores, weights, users


def soft_examples(rank: int, step: int):
    """One evaluation batch of soft labels (0, 0.25, 1), scores with ties
    and user ids, plus user 99 with positives only and user 98 with one
    example (groups that must be left out)."""
    n = 40 + 7 * rank + 5 * step
    rng = np.random.default_rng([31, rank, step])
    labels = rng.choice([0.0, 0.25, 1.0], size=n)
    scores = np.round(rng.uniform(size=n), 1).astype(np.float32)
    users = rng.integers(0, 5, size=n)
    labels = np.concatenate([labels, [1.0, 1.0, 1.0, 0.0]])
    scores = np.concatenate([scores, [0.1, 0.9, 0.5, 0.3]]).astype(np.float32)
    users = np.concatenate([users, [99, 99, 99, 98]]).astype(np.int64)
    return labels, scores, users


def gathered(size: int):
    parts = [examples(r) for r in range(size)]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


def run_v1(build, feed):
    """Builds a metric in a fresh graph; runs its update op, then value."""
    with tf.Graph().as_default():
        value, update = build(*feed)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            sess.run(update)
            return sess.run(value)


def numpy_roc_auc(labels, scores, weights, num_thresholds=200) -> float:
    """tf.compat.v1.metrics.auc's trapezoidal ROC AUC, in numpy."""
    eps = 1e-7
    thresholds = np.array([-eps] + [(i + 1) / (num_thresholds - 1) for i in
                                    range(num_thresholds - 2)] + [1 + eps])
    above = (scores[:, None].astype(np.float32)
             > thresholds[None, :].astype(np.float32))
    pos, neg = weights * (labels > 0), weights * (labels == 0)
    tp, fp = (above * pos[:, None]).sum(0), (above * neg[:, None]).sum(0)
    fn, tn = pos.sum() - tp, neg.sum() - fp
    tpr = (tp + 1e-6) / (tp + fn + 1e-6)
    fpr = fp / (fp + tn + 1e-6)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def exact_auc(labels, scores) -> float:
    """Pairwise AUC, ties one half (labels may be soft)."""
    pos, neg = labels.astype(np.float64), 1.0 - labels.astype(np.float64)
    greater = scores[:, None] > scores[None, :]
    ties = scores[:, None] == scores[None, :]
    pairs = pos[:, None] * neg[None, :]
    return float(np.sum(pairs * (greater + 0.5 * ties))
                 / (pos.sum() * neg.sum()))


def group_sums(labels, scores, users) -> Tuple[float, float]:
    """(sum of size * auc, sum of size) over one batch's user groups that
    have both positives and negatives."""
    total = count = 0.0
    for user in np.unique(users):
        mask = users == user
        if 0 < labels[mask].sum() < mask.sum():
            total += mask.sum() * exact_auc(labels[mask], scores[mask])
            count += mask.sum()
    return total, count


def numpy_gauc(size: int, empty_rank: int = -1) -> float:
    sums = []
    for r in range(size):
        labels, scores, _, users = examples(r, empty=r == empty_rank)
        sums.append(group_sums(labels, scores, users))
    return sum(t for t, _ in sums) / sum(c for _, c in sums)


class Cases:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.mine = examples(rank)
        self.all = gathered(size)

    def accuracy_column_weights(self) -> None:
        """Labels [n, 1], predictions [n], weights [n, 1] (an Estimator's
        usual shapes): TF squeezes labels and weights."""
        labels, scores, weights, _ = self.mine
        got = run_v1(hb_metrics.accuracy, (
            labels[:, None], (scores > 0.5).astype(np.int64),
            weights[:, None]))
        all_l, all_s, all_w, _ = self.all
        correct = (all_s > 0.5).astype(np.int64) == all_l
        close(got, np.sum(correct * all_w) / np.sum(all_w), "accuracy")

    def auc_column_predictions(self) -> None:
        labels, scores, weights, _ = self.mine
        got = run_v1(hb_metrics.auc, (labels, scores[:, None], weights))
        all_l, all_s, all_w, _ = self.all
        close(got, numpy_roc_auc(all_l, all_s, all_w), "auc", rtol=1e-5)

    def mean_column_weights(self) -> None:
        _, scores, weights, _ = self.mine
        got = run_v1(hb_metrics.mean, (scores, weights[:, None]))
        _, all_s, all_w, _ = self.all
        close(got, np.sum(all_s * all_w) / np.sum(all_w), "weighted mean")

    def gauc_users(self) -> None:
        check(hb.metrics.gauc is hb_metrics.gauc, "hb.metrics.gauc")
        labels, scores, _, users = self.mine
        got = run_v1(hb_metrics.gauc, (labels, scores, users))
        close(got, numpy_gauc(self.size), "gauc", rtol=1e-5)

    def gauc_two_columns(self) -> None:
        """Labels and predictions as (non-click, click) columns."""
        labels, scores, _, users = self.mine
        two_l = np.stack([1 - labels, labels], 1).astype(np.float32)
        two_s = np.stack([1 - scores, scores], 1)
        got = run_v1(hb_metrics.gauc, (two_l, two_s, users.astype(np.int32)))
        close(got, numpy_gauc(self.size), "gauc [n, 2]", rtol=1e-5)

    def gauc_empty_rank(self) -> None:
        """The last rank's batch is empty (e.g. unbalanced evaluation)."""
        empty = self.size - 1
        labels, scores, _, users = examples(self.rank, self.rank == empty)
        got = run_v1(hb_metrics.gauc, (labels, scores, users))
        close(got, numpy_gauc(self.size, empty), "gauc, one rank empty",
              rtol=1e-5)

    def gauc_no_indicators(self) -> None:
        """Each example its own group: no group has both classes."""
        labels, scores, _, _ = self.mine
        got = run_v1(hb_metrics.gauc, (labels, scores))
        close(got, 0.0, "gauc without indicators")

    def gauc_eager_raises(self) -> None:
        expect_raises(lambda: hb_metrics.gauc([1, 0], [0.5, 0.2], [1, 1]),
                      RuntimeError, "eager execution")

    def gauc_steps_soft_labels(self) -> None:
        """Two update steps of soft labels: a user's examples in the two
        batches are two groups; update_op returns this rank's own value;
        the state is local metric variables under the scope ``name``; the
        collections hold value and update_op."""
        steps = [soft_examples(self.rank, step) for step in range(2)]
        with tf.Graph().as_default():
            labels = tf.compat.v1.placeholder(tf.float32, [None])
            scores = tf.compat.v1.placeholder(tf.float32, [None])
            users = tf.compat.v1.placeholder(tf.int64, [None])
            value, update = hb_metrics.gauc(
                labels, scores, users, metrics_collections=["gauc_values"],
                updates_collections=["gauc_updates"], name="user_gauc")
            get = tf.compat.v1.get_collection
            check(get("gauc_values") == [value], "metrics_collections")
            check(get("gauc_updates") == [update], "updates_collections")
            local = tf.compat.v1.local_variables()
            check(bool(local) and local == get(
                tf.compat.v1.GraphKeys.METRIC_VARIABLES)
                and not tf.compat.v1.global_variables(),
                "state is local metric variables only: %s" % local)
            check(all(v.op.name.startswith("user_gauc/") for v in local),
                  "variables under the name: %s" % [v.name for v in local])
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.local_variables_initializer())
                for step_labels, step_scores, step_users in steps:
                    own = sess.run(update, {labels: step_labels,
                                            scores: step_scores,
                                            users: step_users})
                got = sess.run(value)
        mine = [group_sums(*batch) for batch in steps]
        close(own, sum(t for t, _ in mine) / sum(c for _, c in mine),
              "update_op: this rank's gauc", rtol=1e-5)
        every = [group_sums(*soft_examples(r, step))
                 for r in range(self.size) for step in range(2)]
        close(got, sum(t for t, _ in every) / sum(c for _, c in every),
              "gauc over every rank's two steps", rtol=1e-5)

    def gauc_bad_input(self) -> None:
        """Errors that name the argument, at graph construction when the
        shapes are known, else when update_op runs."""
        gauc = hb_metrics.gauc
        with tf.Graph().as_default():
            expect_raises(lambda: gauc([1.0, 0.0], [0.5, 0.2], [1.0, 1.0]),
                          TypeError, "indicators must be int32 or int64 "
                          "(the group id of each example), got float32")
            expect_raises(lambda: gauc([1.0, 0.0, 1.0], [0.5, 0.2],
                                       [1, 1, 1]),
                          ValueError, "one value per example, got labels "
                          "3, predictions 2, indicators 3")
            expect_raises(lambda: gauc([1.0, 0.0], [0.5, 0.2], [1, 1, 2]),
                          ValueError, "labels 2, predictions 2, indicators 3")
            expect_raises(lambda: gauc([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.2],
                                       [1, 1]),
                          ValueError, "predictions must have the same "
                          "shape, got (2,)")
            labels = tf.compat.v1.placeholder(tf.float32, [None])
            scores = tf.compat.v1.placeholder(tf.float32, [None])
            _, update = gauc(labels, scores, [1, 1, 2])
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.local_variables_initializer())
                expect_raises(lambda: sess.run(update, {
                    labels: [1.0, 0.0, 1.0], scores: [0.5, 0.2]}),
                    tf.errors.InvalidArgumentError, "predictions and labels "
                    "must have the same number of examples")


def case_table(rank: int, size: int) -> Dict[str, Callable[[], None]]:
    """CASES' functions, in order, for run_table (hbcore initialized)."""
    c = Cases(rank, size)
    return {
        "v1/weights/accuracy-labels-n1-weights-n1": c.accuracy_column_weights,
        "v1/weights/auc-predictions-n1-weights-n": c.auc_column_predictions,
        "v1/weights/mean-values-n-weights-n1": c.mean_column_weights,
        "v1/gauc/users": c.gauc_users,
        "v1/gauc/two-columns": c.gauc_two_columns,
        "v1/gauc/empty-rank": c.gauc_empty_rank,
        "v1/gauc/no-indicators": c.gauc_no_indicators,
        "v1/gauc/eager-raises": c.gauc_eager_raises,
        "v1/gauc/steps-soft-labels-collections": c.gauc_steps_soft_labels,
        "v1/gauc/bad-input": c.gauc_bad_input,
    }
