"""``hb.metrics``: tf.compat.v1.metrics computed over the examples of every rank.

    auc, auc_update = hb.metrics.auc(labels, probabilities)
    acc, acc_update = hb.metrics.accuracy(labels, predicted_classes)
    loss_mean, loss_update = hb.metrics.mean(loss)
    gauc, gauc_update = hb.metrics.gauc(labels, probabilities, user_ids)

Semantics are those of tf.compat.v1.metrics (local variables in the
LOCAL_VARIABLES and METRIC_VARIABLES collections, ``(value, update_op)``,
RuntimeError under eager execution, metrics_collections and
updates_collections), with one difference: ``value`` is the metric of all
ranks' examples together, as if one process had seen them all.

Protocol: ``update_op`` only accumulates this rank's counts (no
communication: ranks may run different numbers of update steps, e.g. on
unbalanced evaluation data). ``value`` sums the counts over ranks with one
fused allreduce and computes the metric from the sums. Invariant: ``value``
is a collective; every rank must evaluate it the same number of times
(hb.train.EvaluationHook does). The graph built is the same on every rank.
"""
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from hbcore_tf import mpi_ops

_LOCAL = tf.compat.v1.GraphKeys.LOCAL_VARIABLES
_METRIC = tf.compat.v1.GraphKeys.METRIC_VARIABLES
_CURVES = ("ROC", "PR")
_SUMMATIONS = ("trapezoidal", "careful_interpolation", "minoring", "majoring")


def _check_graph_mode(name: str) -> None:
    if tf.executing_eagerly():
        raise RuntimeError("hb.metrics.%s is not supported when eager "
                           "execution is enabled." % name)


def _metric_variable(shape: Sequence[int], name: str) -> tf.Variable:
    return tf.compat.v1.get_variable(
        name, shape=shape, dtype=tf.float64, trainable=False,
        initializer=tf.compat.v1.zeros_initializer(),
        collections=[_LOCAL, _METRIC],
        aggregation=tf.VariableAggregation.SUM)


def _add_to(collections: Optional[Sequence[str]], value: Any) -> None:
    for collection in collections or ():
        tf.compat.v1.add_to_collection(collection, value)


def _summed(variables: List[tf.Variable], name: str) -> List[tf.Tensor]:
    """The variables' values summed over ranks, in one fused allreduce."""
    return mpi_ops.grouped_allreduce([v.read_value() for v in variables],
                                     op=mpi_ops.Sum, name=name)


def _weights_like(values: tf.Tensor, weights: Any) -> tf.Tensor:
    """``weights`` as float64 in the shape of ``values``.

    As tf.compat.v1.metrics (``_remove_squeezable_dimensions``): weights
    with one more dimension than ``values`` lose their trailing dimension
    of 1, weights with one dimension fewer gain one, then they broadcast.
    """
    if weights is None:
        return tf.ones_like(values, tf.float64)
    weights = tf.cast(weights, tf.float64)
    v_rank, w_rank = values.shape.rank, weights.shape.rank
    if v_rank is not None and w_rank:
        if w_rank == v_rank + 1 and weights.shape[-1] in (1, None):
            weights = tf.squeeze(weights, [-1])
        elif v_rank == w_rank + 1:
            weights = tf.expand_dims(weights, -1)
    return tf.broadcast_to(weights, tf.shape(values))


def _finish(name: str, value: tf.Tensor, update: Any,
            metrics_collections: Any, updates_collections: Any
            ) -> Tuple[tf.Tensor, tf.Tensor]:
    _add_to(metrics_collections, value)
    _add_to(updates_collections, update)
    return value, update


def mean(values: Any, weights: Any = None, metrics_collections: Any = None,
         updates_collections: Any = None, name: Optional[str] = None
         ) -> Tuple[tf.Tensor, tf.Tensor]:
    """The (weighted) mean of ``values`` over every rank's examples.

    Args:
      values: a tensor of any shape.
      weights: None, or a tensor broadcastable to ``values``.
      metrics_collections: collections to add the mean to.
      updates_collections: collections to add ``update_op`` to.
      name: variable scope name.

    Returns:
      ``(mean, update_op)``: the global mean (a collective), and the op
      that accumulates this rank's values (returns this rank's mean).

    Raises:
      RuntimeError: eager execution is enabled.
    """
    _check_graph_mode("mean")
    with tf.compat.v1.variable_scope(name, "mean", (values, weights)):
        values = tf.cast(values, tf.float64)
        weights = _weights_like(values, weights)
        total = _metric_variable([], "total")
        count = _metric_variable([], "count")
        update_total = total.assign_add(tf.reduce_sum(values * weights))
        update_count = count.assign_add(tf.reduce_sum(weights))
        with tf.control_dependencies([update_total, update_count]):
            update = tf.math.divide_no_nan(update_total, update_count,
                                           name="update_op")
        global_total, global_count = _summed([total, count], "global_counts")
        value = tf.math.divide_no_nan(global_total, global_count, name="value")
        return _finish("mean", tf.cast(value, tf.float32),
                       tf.cast(update, tf.float32), metrics_collections,
                       updates_collections)


def accuracy(labels: Any, predictions: Any, weights: Any = None,
             metrics_collections: Any = None, updates_collections: Any = None,
             name: Optional[str] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """How often ``predictions`` equals ``labels``, over every rank's examples.

    Args:
      labels: ground truth, same shape as ``predictions``.
      predictions: predicted values (classes, not probabilities).
      weights: None, or a tensor broadcastable to ``labels``.
      metrics_collections, updates_collections, name: as tf.compat.v1.metrics.

    Returns:
      ``(accuracy, update_op)`` (see ``mean``).

    Raises:
      RuntimeError: eager execution is enabled.
      ValueError: the shapes of labels and predictions are incompatible.
    """
    _check_graph_mode("accuracy")
    labels = tf.convert_to_tensor(labels)
    predictions = tf.convert_to_tensor(predictions)
    predictions, labels = _squeeze_last(predictions, labels)
    if labels.dtype != predictions.dtype:
        predictions = tf.cast(predictions, labels.dtype)
    predictions.get_shape().assert_is_compatible_with(labels.get_shape())
    is_correct = tf.cast(tf.equal(predictions, labels), tf.float64)
    return mean(is_correct, weights, metrics_collections,
                updates_collections, name or "accuracy")


def _squeeze_last(predictions: tf.Tensor, labels: tf.Tensor
                  ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Drops a trailing dimension of 1 from whichever side has one more
    dimension than the other (as tf.compat.v1.metrics does)."""
    p_rank, l_rank = predictions.shape.rank, labels.shape.rank
    if p_rank is not None and l_rank is not None:
        if p_rank == l_rank + 1 and predictions.shape[-1] == 1:
            predictions = tf.squeeze(predictions, [-1])
        elif l_rank == p_rank + 1 and labels.shape[-1] == 1:
            labels = tf.squeeze(labels, [-1])
    return predictions, labels


def auc_thresholds(num_thresholds: int) -> List[float]:
    """The thresholds tf.compat.v1.metrics.auc uses: just below 0, the
    num_thresholds - 2 evenly spaced points inside (0, 1), just above 1.

    Args:
      num_thresholds: number of thresholds, end points included (> 1;
        smaller values give just the two end points).

    Returns:
      ``num_thresholds`` floats in increasing order, from ``-1e-7`` to
      ``1 + 1e-7``.
    """
    epsilon = 1e-7
    inner = [(i + 1) * 1.0 / (num_thresholds - 1)
             for i in range(num_thresholds - 2)]
    return [0.0 - epsilon] + inner + [1.0 + epsilon]


def auc(labels: Any, predictions: Any, weights: Any = None,
        num_thresholds: int = 200, metrics_collections: Any = None,
        updates_collections: Any = None, curve: str = "ROC",
        name: Optional[str] = None, summation_method: str = "trapezoidal",
        thresholds: Optional[Sequence[float]] = None
        ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Area under the ROC or PR curve over every rank's examples.

    The confusion counts (true/false positives/negatives at each
    threshold) are accumulated per rank and summed over ranks; the area is
    computed from the sums as tf.compat.v1.metrics.auc computes it.

    Args:
      labels: ground truth, cast to bool (non-zero is positive).
      predictions: probabilities in [0, 1], same shape as ``labels``.
      weights: None, or a tensor broadcastable to ``labels``.
      num_thresholds: number of thresholds (> 1).
      metrics_collections, updates_collections, name: as tf.compat.v1.metrics.
      curve: "ROC" or "PR".
      summation_method: "trapezoidal", "careful_interpolation" (exact
        interpolation for PR; trapezoidal for ROC), "minoring", "majoring".
      thresholds: explicit thresholds in [0, 1] (then num_thresholds is
        ignored); the end points just outside [0, 1] are added.

    Returns:
      ``(auc, update_op)``: the global area (a collective) and the op that
      accumulates this rank's counts (returns this rank's own area).

    Raises:
      RuntimeError: eager execution is enabled.
      ValueError: bad curve, summation_method or num_thresholds.
    """
    _check_graph_mode("auc")
    if curve not in _CURVES:
        raise ValueError("curve must be one of %s, got %r" % (_CURVES, curve))
    if summation_method not in _SUMMATIONS:
        raise ValueError("Invalid summation_method: %s; expected one of %s"
                         % (summation_method, _SUMMATIONS))
    if thresholds is not None:
        points = [0.0 - 1e-7] + [float(t) for t in thresholds] + [1.0 + 1e-7]
    else:
        if num_thresholds < 2:
            raise ValueError("num_thresholds must be > 1, got %r"
                             % (num_thresholds,))
        points = auc_thresholds(num_thresholds)
    with tf.compat.v1.variable_scope(name, "auc",
                                     (labels, predictions, weights)):
        predictions = tf.convert_to_tensor(predictions)
        weights = _weights_like(predictions, weights)
        labels = tf.reshape(tf.cast(labels, tf.bool), [-1, 1])
        weights = tf.reshape(weights, [-1, 1])
        checks = [tf.debugging.assert_greater_equal(
            predictions, tf.cast(0.0, predictions.dtype),
            message="predictions must be in [0, 1]"),
            tf.debugging.assert_less_equal(
                predictions, tf.cast(1.0, predictions.dtype),
                message="predictions must be in [0, 1]")]
        with tf.control_dependencies(checks):
            predictions = tf.reshape(tf.cast(predictions, tf.float32), [-1, 1])
        above = tf.greater(predictions,
                           tf.constant([points], tf.float32))  # [n, t]
        positive = tf.cast(labels, tf.float64) * weights
        negative = (1.0 - tf.cast(labels, tf.float64)) * weights
        above_f = tf.cast(above, tf.float64)
        counts = {
            "true_positives": tf.reduce_sum(above_f * positive, 0),
            "false_negatives": tf.reduce_sum((1.0 - above_f) * positive, 0),
            "true_negatives": tf.reduce_sum((1.0 - above_f) * negative, 0),
            "false_positives": tf.reduce_sum(above_f * negative, 0),
        }
        variables = {key: _metric_variable([len(points)], key)
                     for key in counts}
        updates = {key: variables[key].assign_add(counts[key])
                   for key in counts}
        area = _area_fn(curve, summation_method)
        update = tf.cast(area(**updates), tf.float32, name="update_op")
        keys = list(variables)
        summed = dict(zip(keys, _summed([variables[k] for k in keys],
                                        "global_counts")))
        value = tf.cast(area(**summed), tf.float32, name="value")
        return _finish("auc", value, update, metrics_collections,
                       updates_collections)


def _area_fn(curve: str, summation_method: str) -> Callable[..., tf.Tensor]:
    """The area from the confusion counts, as tf.compat.v1.metrics.auc."""
    def area(true_positives, false_negatives, true_negatives,
             false_positives) -> tf.Tensor:
        tp, fn, tn, fp = (true_positives, false_negatives, true_negatives,
                          false_positives)
        if curve == "PR" and summation_method == "careful_interpolation":
            return _interpolated_pr_area(tp, fp, fn)
        epsilon = 1.0e-6
        recall = (tp + epsilon) / (tp + fn + epsilon)
        if curve == "ROC":
            x, y = fp / (fp + tn + epsilon), recall
        else:
            x, y = recall, (tp + epsilon) / (tp + fp + epsilon)
        width = x[:-1] - x[1:]
        if summation_method == "minoring":
            height = tf.minimum(y[:-1], y[1:])
        elif summation_method == "majoring":
            height = tf.maximum(y[:-1], y[1:])
        else:
            height = (y[:-1] + y[1:]) / 2.0
        return tf.reduce_sum(width * height)
    return area


def _interpolated_pr_area(tp: tf.Tensor, fp: tf.Tensor, fn: tf.Tensor
                          ) -> tf.Tensor:
    """PR area with precision interpolated between thresholds (Davis and
    Goadrich 2006), as tf.compat.v1.metrics.auc's careful_interpolation."""
    dtp = tp[:-1] - tp[1:]
    p = tp + fp
    slope = tf.math.divide_no_nan(dtp, tf.maximum(p[:-1] - p[1:], 0.0))
    intercept = tp[1:] - slope * p[1:]
    ratio = tf.where(tf.logical_and(p[:-1] > 0, p[1:] > 0),
                     tf.math.divide_no_nan(p[:-1], tf.maximum(p[1:], 0.0)),
                     tf.ones_like(p[1:]))
    return tf.reduce_sum(tf.math.divide_no_nan(
        slope * (dtp + intercept * tf.math.log(ratio)),
        tf.maximum(tp[1:] + fn[1:], 0.0)))


def gauc(labels: Any, predictions: Any, indicators: Any = None,
         metrics_collections: Any = None, updates_collections: Any = None,
         name: Optional[str] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Group AUC: the mean of per-group ROC AUCs, weighted by group size,
    over every rank's examples.

    Within each batch, the examples with the same ``indicators`` value
    (e.g. a user id) form a group; a group's AUC is the exact
    rank-statistic AUC of its examples (ties count one half). Groups whose
    examples are all positive or all negative are left out. The global
    value is ``sum(size_g * auc_g) / sum(size_g)`` over the groups of every
    batch of every rank (a group split over batches or ranks counts as one
    group per batch).

    Args:
      labels: click labels in [0, 1] (soft labels allowed: an example adds
        ``label`` to the positives and ``1 - label`` to the negatives), of
        shape ``[n]`` or ``[n, 1]``; or ``[n, 2]`` holding (non-click,
        click), then ``predictions`` is ``[n, 2]`` too and its column 1 is
        the score.
      predictions: scores, the same number of examples as ``labels``.
      indicators: the group of each example (int32 or int64, ``[n]``);
        None: every example is its own group (so no group counts).
      metrics_collections, updates_collections, name: as
        tf.compat.v1.metrics.

    Returns:
      ``(gauc, update_op)`` (see ``mean``).

    Differences from HybridBackend's kernel, which has no test or
    documentation of its own ("approximate gAUC"): it groups runs of
    consecutive equal indicators and leaves out the first and the last run
    of every batch, and orders tied scores arbitrarily; here every group
    counts, a group is every example of the batch with its indicator value
    (the same groups for a batch sorted by indicator), and ties count one
    half, so the value does not depend on the order of the examples.

    Raises:
      RuntimeError: eager execution is enabled.
      TypeError: ``indicators`` is not int32 or int64.
      ValueError: labels, predictions and indicators do not have the same
        number of examples (when the shapes are known; otherwise running
        ``update_op`` raises tf.errors.InvalidArgumentError saying so), or
        ``[n, 2]`` labels with predictions of another shape.
    """
    _check_graph_mode("gauc")
    with tf.compat.v1.variable_scope(name, "gauc",
                                     (labels, predictions, indicators)):
        labels, predictions, indicators = _gauc_inputs(
            labels, predictions, indicators)
        aucs, sizes = _group_aucs(labels, predictions, indicators)
        return mean(aucs, sizes, metrics_collections, updates_collections)


def _gauc_inputs(labels: Any, predictions: Any, indicators: Any
                 ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Labels and scores as float64 vectors, indicators as a vector of the
    same length (None: one group per example), checked."""
    labels = tf.convert_to_tensor(labels)
    predictions = tf.convert_to_tensor(predictions)
    two_columns = labels.shape.rank == 2 and labels.shape[-1] == 2
    if two_columns and not predictions.shape.is_compatible_with(
            labels.shape):
        raise ValueError(
            "hb.metrics.gauc: labels of shape %s are (non-click, click) "
            "columns, so predictions must have the same shape, got %s"
            % (labels.shape, predictions.shape))
    labels, scores = _click_columns(labels, predictions)
    if indicators is None:
        indicators = tf.range(tf.size(scores))
    else:
        indicators = tf.convert_to_tensor(indicators)
        if indicators.dtype not in (tf.int32, tf.int64):
            raise TypeError(
                "hb.metrics.gauc: indicators must be int32 or int64 (the "
                "group id of each example), got %s" % indicators.dtype.name)
        indicators = tf.reshape(indicators, [-1])
    named = (("labels", labels), ("predictions", scores),
             ("indicators", indicators))
    counts = [(what, t.shape[0]) for what, t in named]
    known = [(what, n) for what, n in counts if n is not None]
    if len({n for _, n in known}) > 1:
        raise ValueError(
            "hb.metrics.gauc: labels, predictions and indicators must have "
            "one value per example, got %s"
            % ", ".join("%s %d" % (what, n) for what, n in counts
                        if n is not None))
    checks = [tf.debugging.assert_equal(
        tf.size(t), tf.size(labels),
        message="hb.metrics.gauc: %s and labels must have the same number "
        "of examples" % what) for what, t in named[1:]]
    with tf.control_dependencies(checks):
        return (tf.identity(labels), tf.identity(scores),
                tf.identity(indicators))


def _click_columns(labels: Any, predictions: Any
                   ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Labels and scores as float64 vectors (column 1 of ``[n, 2]``)."""
    labels = tf.cast(labels, tf.float64)
    predictions = tf.cast(predictions, tf.float64)
    if labels.shape.rank == 2 and labels.shape[-1] == 2:
        labels, predictions = labels[:, 1], predictions[:, 1]
    return tf.reshape(labels, [-1]), tf.reshape(predictions, [-1])


def _group_aucs(labels: tf.Tensor, scores: tf.Tensor, indicators: tf.Tensor
                ) -> Tuple[tf.Tensor, tf.Tensor]:
    """The AUC and size of each group with positives and negatives, from
    the vectors ``_gauc_inputs`` returns."""
    unique, group = tf.unique(indicators)
    num_groups = tf.size(unique)
    pos, neg = labels, 1.0 - labels
    # Sort by (group, score); runs of equal (group, score) are the ties.
    by_score = tf.argsort(scores, stable=True)
    order = tf.gather(by_score, tf.argsort(tf.gather(group, by_score),
                                           stable=True))
    g, s = tf.gather(group, order), tf.gather(scores, order)
    first = tf.ones([tf.minimum(tf.size(g), 1)], tf.bool)
    new_run = tf.concat([first, tf.logical_or(
        tf.not_equal(g[1:], g[:-1]), tf.not_equal(s[1:], s[:-1]))], 0)
    run = tf.cumsum(tf.cast(new_run, tf.int32)) - 1
    num_runs = tf.reduce_sum(tf.cast(new_run, tf.int32))
    run_pos = tf.math.unsorted_segment_sum(tf.gather(pos, order), run,
                                           num_runs)
    run_neg = tf.math.unsorted_segment_sum(tf.gather(neg, order), run,
                                           num_runs)
    run_group = tf.math.unsorted_segment_max(g, run, num_runs)
    # Negatives below each run within its group: an exclusive prefix sum
    # less the prefix at the group's first run.
    before = tf.cumsum(run_neg, exclusive=True)
    group_first = tf.math.unsorted_segment_min(tf.range(num_runs),
                                               run_group, num_groups)
    below = before - tf.gather(before, tf.gather(group_first, run_group))
    area = tf.math.unsorted_segment_sum(run_pos * (below + 0.5 * run_neg),
                                        run_group, num_groups)
    total_pos = tf.math.unsorted_segment_sum(pos, group, num_groups)
    total_neg = tf.math.unsorted_segment_sum(neg, group, num_groups)
    sizes = tf.math.unsorted_segment_sum(tf.ones_like(pos), group,
                                         num_groups)
    valid = tf.logical_and(total_pos > 0, total_neg > 0)
    aucs = tf.math.divide_no_nan(area, total_pos * total_neg)
    return tf.boolean_mask(aucs, valid), tf.boolean_mask(sizes, valid)


__all__ = ["accuracy", "auc", "auc_thresholds", "gauc", "mean"]
