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

``fn`` is called once per session, in ``begin()`` (before the graph is
finalized), and returns a dict ``name -> (value, update_op)`` as
hb.metrics (or tf.compat.v1.metrics) return them. As in HybridBackend,
``fn`` runs under ``reuse=tf.compat.v1.AUTO_REUSE``: a model built again
with ``tf.compat.v1.get_variable`` (or named tf.compat.v1 layers) gets the
trained variables back instead of new ones (an evaluation of an untrained
copy, or "Variable ... already exists"); local variables (metric state)
are always created anew.

Every ``every_n_iter`` training steps of the session (counted from its
start), on every rank: the metric variables ``fn`` created are reset (and
the initializable iterators it created re-initialized), the update ops
run ``steps`` times (fewer if the evaluation data runs out on this rank:
updates are local, so ranks may run different numbers; with
``steps=None``, as in HybridBackend, until the data runs out), then the
values are fetched once (a value of one element becomes a Python number,
a larger one stays a numpy array). With hb.metrics the values are
collectives and global: every rank gets the same numbers. Rank 0 logs
them, writes them as TensorBoard scalars (arrays as tensor summaries)
under ``summary_dir`` (at the global step when the graph has one) and
every rank appends ``{"step": s, name: value, ...}`` to ``history`` when
given. When the session ends normally (including the end of the input,
OutOfRangeError), ``end()`` runs one more evaluation unless the last step
was just evaluated.

Invariant: every rank runs the same training steps (data sync makes sure),
so every rank evaluates at the same steps and the collectives match.
"""
import itertools
import logging
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf import mpi_ops

_log = logging.getLogger("hbcore_tf")


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("EvaluationHook: %s must be a positive integer, got "
                         "%r" % (name, value))
    return value


def _fresh_local_getter(getter: Callable[..., Any], *args: Any,
                        **kwargs: Any) -> Any:
    """A custom getter that never reuses a local variable: under the
    AUTO_REUSE scope of ``fn`` model weights are shared with training, but
    metric state must start from its own variables."""
    local = (tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
             tf.compat.v1.GraphKeys.METRIC_VARIABLES)
    if any(c in local for c in kwargs.get("collections") or ()):
        kwargs["reuse"] = False
    return getter(*args, **kwargs)


def _fetched(value: Any) -> Any:
    """A fetched metric value as history keeps it: a Python number for
    one element, the numpy array otherwise (bytes and the like as
    fetched)."""
    if isinstance(value, (np.ndarray, np.generic)) and value.size == 1:
        return value.item()
    return value


def _summary_values(names: List[str], results: Dict[str, Any]
                    ) -> List[Any]:
    """Summary.Value protos for the values: numbers as scalars, numeric
    arrays as tensors; anything else is skipped with a warning."""
    out = []
    for name in names:
        value = results[name]
        if isinstance(value, (bool, int, float, np.bool_, np.number)):
            out.append(tf.compat.v1.Summary.Value(
                tag=name, simple_value=float(value)))
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out.append(tf.compat.v1.Summary.Value(
                tag=name, tensor=tf.make_tensor_proto(value)))
        else:
            _log.warning("EvaluationHook: no summary for %s (a %s)", name,
                         type(value).__name__)
    return out


class EvaluationHook(tf.compat.v1.train.SessionRunHook):
    """Runs ``fn``'s metrics every ``every_n_iter`` steps (see module doc).

    Args:
      fn: builds the metrics; returns a dict name -> (value, update_op).
      steps: evaluation steps (update_op runs) per evaluation; None runs
        them until the evaluation data raises OutOfRangeError.
      every_n_iter: training steps between evaluations.
      summary_dir: where rank 0 writes the values as summaries (None: none).
      history: a list to which each evaluation's values are appended.

    Raises:
      ValueError: steps is neither None nor a positive integer,
        every_n_iter is not a positive integer, or fn
        does not return a dict of (value, update_op) pairs (in begin()).
    """

    def __init__(self, fn: Callable[[], Dict[str, Any]],
                 steps: Optional[int] = 100,
                 every_n_iter: int = 1000, summary_dir: Optional[str] = None,
                 history: Optional[List[Dict[str, Any]]] = None) -> None:
        if not callable(fn):
            raise ValueError("EvaluationHook: fn must be callable, got %r"
                             % (fn,))
        self._fn = fn
        self._steps = None if steps is None else _positive("steps", steps)
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
        # Counted per session, as HybridBackend's hook does.
        self._step = 0
        self._evaluated_at = 0
        graph = tf.compat.v1.get_default_graph()
        first_op = len(graph.get_operations())
        local_before = set(id(v) for v in tf.compat.v1.local_variables())
        # HybridBackend's eval_scope: reuse the model's variables.
        with tf.compat.v1.variable_scope(
                tf.compat.v1.get_variable_scope(),
                reuse=tf.compat.v1.AUTO_REUSE,
                custom_getter=_fresh_local_getter,
                auxiliary_name_scope=False):
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
        created, runs the update ops up to ``steps`` times (until the end
        of this rank's data when ``steps`` is None; stopping early at the
        end of this rank's data), then fetches the values once;
        rank 0 logs them and writes the summaries, and ``history`` gets
        them appended.

        Args:
          session: a session of the graph ``begin()`` built the metrics in.

        Returns:
          The values by name, plus "step" (the global step when the graph
          has one, else this hook's count of training steps).
        """
        session.run(self._reset)
        for _ in (itertools.count() if self._steps is None
                  else range(self._steps)):
            try:
                session.run(self._updates)
            except tf.errors.OutOfRangeError:
                break
        values = session.run(self._values)
        step = self._step if self._global_step is None else int(
            session.run(self._global_step))
        results: Dict[str, Any] = {"step": step}
        results.update(zip(self._names, (_fetched(v) for v in values)))
        if mpi_ops.rank() == 0:
            _log.info("evaluation at step %d: %s", step, ", ".join(
                "%s = %s" % (n, results[n]) for n in self._names))
        if self._writer is not None:
            summary = tf.compat.v1.Summary(
                value=_summary_values(self._names, results))
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
