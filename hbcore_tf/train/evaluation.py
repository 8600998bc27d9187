"""``hb.train.EvaluationHook``: periodic evaluation with global metrics.

    def eval_fn():
        # Initializable: the hook re-initializes it before each evaluation
        # (a one-shot iterator would go on where the last one stopped).
        features, labels = hb.data.make_initializable_iterator(
            eval_ds).get_next()
        probs = model(features)
        return {"auc": hb.metrics.auc(labels, probs)}

    hooks = [hb.train.EvaluationHook(eval_fn, steps=100, every_n_iter=1000,
                                     summary_dir=model_dir, history=hist)]

``fn`` is called once, in ``begin()`` (before the graph is finalized), and
returns a dict ``name -> (value, update_op)`` as hb.metrics (or
tf.compat.v1.metrics) return them. Every ``every_n_iter`` training steps of
this session, on every rank: the metric variables ``fn`` created are reset
(and the initializable iterators it created re-initialized), the update
ops run ``steps`` times (fewer if the evaluation data runs out on this
rank: updates are local, so ranks may run different numbers), then the
values are fetched once. With hb.metrics the values are collectives and
global: every rank gets the same numbers. Rank 0 logs them, writes them as
TensorBoard scalars under ``summary_dir`` (at the global step when the
graph has one) and every rank appends ``{"step": s, name: value, ...}`` to
``history`` when given. When the session ends normally (including the end
of the input, OutOfRangeError), ``end()`` runs one more evaluation unless
the last step was just evaluated.

Invariant: every rank runs the same training steps (data sync makes sure),
so every rank evaluates at the same steps and the collectives match.
"""
import logging
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from hbcore_tf import mpi_ops

_log = logging.getLogger("hbcore_tf")


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("EvaluationHook: %s must be a positive integer, got "
                         "%r" % (name, value))
    return value


class EvaluationHook(tf.compat.v1.train.SessionRunHook):
    """Runs ``fn``'s metrics every ``every_n_iter`` steps (see module doc).

    Args:
      fn: builds the metrics; returns a dict name -> (value, update_op).
      steps: evaluation steps (update_op runs) per evaluation.
      every_n_iter: training steps between evaluations.
      summary_dir: where rank 0 writes the values as summaries (None: none).
      history: a list to which each evaluation's values are appended.

    Raises:
      ValueError: steps or every_n_iter is not a positive integer, or fn
        does not return a dict of (value, update_op) pairs (in begin()).
    """

    def __init__(self, fn: Callable[[], Dict[str, Any]], steps: int = 100,
                 every_n_iter: int = 1000, summary_dir: Optional[str] = None,
                 history: Optional[List[Dict[str, Any]]] = None) -> None:
        if not callable(fn):
            raise ValueError("EvaluationHook: fn must be callable, got %r"
                             % (fn,))
        self._fn = fn
        self._steps = _positive("steps", steps)
        self._every_n_iter = _positive("every_n_iter", every_n_iter)
        self._summary_dir = summary_dir
        self._history = history
        self._step = 0
        self._evaluated_at = 0
        self._writer = None

    def begin(self) -> None:
        """Calls ``fn`` to build the metrics and the ops that reset them.

        Raises:
          ValueError: ``fn`` does not return a dict of (value, update_op)
            pairs.
        """
        graph = tf.compat.v1.get_default_graph()
        first_op = len(graph.get_operations())
        local_before = set(id(v) for v in tf.compat.v1.local_variables())
        with tf.name_scope("hb_evaluation"):
            metrics = self._fn()
        if not isinstance(metrics, dict) or not all(
                isinstance(m, (tuple, list)) and len(m) == 2
                for m in metrics.values()):
            raise ValueError("EvaluationHook: fn must return a dict name -> "
                             "(value, update_op), got %r" % (metrics,))
        self._names = sorted(metrics)
        self._values = [metrics[n][0] for n in self._names]
        self._updates = [metrics[n][1] for n in self._names]
        created = [v for v in tf.compat.v1.local_variables()
                   if id(v) not in local_before]
        self._reset = [tf.compat.v1.variables_initializer(created)]
        self._reset += [op for op in graph.get_operations()[first_op:]
                        if op.type == "MakeIterator"]
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._summary_dir and mpi_ops.rank() == 0:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(
                self._summary_dir)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Counts the training step; evaluates every ``every_n_iter``.

        Args:
          run_context: the SessionRunContext (its session runs the
            evaluation).
          run_values: the step's SessionRunValues (unused).
        """
        self._step += 1
        if self._step % self._every_n_iter == 0:
            self.evaluate(run_context.session)
            self._evaluated_at = self._step

    def evaluate(self, session: Any) -> Dict[str, Any]:
        """Runs one evaluation now (every rank must call it together).

        Resets the metric variables (and initializable iterators) ``fn``
        created, runs the update ops up to ``steps`` times (stopping early
        at the end of this rank's data), then fetches the values once;
        rank 0 logs them and writes the summaries, and ``history`` gets
        them appended.

        Args:
          session: a session of the graph ``begin()`` built the metrics in.

        Returns:
          The values by name, plus "step" (the global step when the graph
          has one, else this hook's count of training steps).
        """
        session.run(self._reset)
        for _ in range(self._steps):
            try:
                session.run(self._updates)
            except tf.errors.OutOfRangeError:
                break
        values = session.run(self._values)
        step = self._step if self._global_step is None else int(
            session.run(self._global_step))
        results: Dict[str, Any] = {"step": step}
        results.update(zip(self._names, (v.item() if hasattr(v, "item")
                                         else v for v in values)))
        if mpi_ops.rank() == 0:
            _log.info("evaluation at step %d: %s", step, ", ".join(
                "%s = %s" % (n, results[n]) for n in self._names))
        if self._writer is not None:
            summary = tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=n, simple_value=float(results[n]))
                for n in self._names])
            self._writer.add_summary(summary, step)
            self._writer.flush()
        if self._history is not None:
            self._history.append(results)
        return results

    def end(self, session: Any) -> None:
        """Runs a last evaluation unless the last step was just evaluated,
        then flushes the summary writer.

        Args:
          session: the session that is ending.
        """
        # MonitoredSession calls end() on every rank when training stops
        # normally; every rank stopped after the same step (data sync), so
        # the decision below is the same everywhere.
        if self._step > self._evaluated_at:
            self.evaluate(session)
            self._evaluated_at = self._step
        if self._writer is not None:
            self._writer.flush()


__all__ = ["EvaluationHook"]
