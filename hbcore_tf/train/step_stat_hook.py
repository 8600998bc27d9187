"""``hb.train.StepStatHook``: HybridBackend's step statistics hook.

Logs, at INFO level of TensorFlow's logger, one line per window of steps:

    secs/step: 0.01234 (87.65%), samples/sec: 2592.00

- ``secs/step``: the median duration of the window's steps, each step
  timed from the hook's before_run to its after_run (the session.run);
- the percentage: 10th over 90th percentile of those durations, a
  stability figure (100% when every step took the same time);
- ``<unit>s/sec`` (with ``count`` only): the window's total count over
  the window's total duration.

A window is ``every_n_iter`` steps; the steps left when the session ends
(all of them with ``every_n_iter=None``) are logged by ``end()``.

The numbers are this rank's, as in HybridBackend, whose hook aggregates
nothing across workers: no collective runs, so ranks may run different
numbers of steps. In data-parallel training the job's rate is the sum of
the ranks' rates.
"""
import numbers
import time
from typing import Any, List, Optional, Union

import numpy as np
import tensorflow as tf

_V1 = tf.compat.v1

# The clock that times steps: monotonic, unaffected by wall-clock changes.
# A module attribute, read at every step, so that a test can substitute a
# deterministic one.
_clock = time.perf_counter


def window_summary(durations: List[float], counts: Optional[List[float]],
                   unit: str) -> str:
    """The log line of a window of steps.

    Args:
        durations: seconds of each step (at least one).
        counts: what each step counted (same length), or None.
        unit: the name of a counted thing ("sample").

    Returns:
        ``secs/step: <p50> (<p10/p90 %>)``, then ``, <unit>s/sec: <rate>``
        when ``counts`` is given.
    """
    durs = np.asarray(durations, np.float64)
    p10, p50, p90 = np.percentile(durs, [10, 50, 90])
    # Equal durations (p10 == p90, 0 included) are fully stable.
    stability = 100.0 if p90 == p10 else 100.0 * p10 / p90
    line = "secs/step: %.5f (%.2f%%)" % (p50, stability)
    if counts is not None:
        total = float(np.sum(np.asarray(counts, np.float64)))
        seconds = float(np.sum(durs))
        rate = total / seconds if seconds > 0 else float("inf")
        line += ", %ss/sec: %.2f" % (unit, rate)
    return line


def _check_count(count: Any) -> Any:
    if count is None or isinstance(count, (tf.Tensor, tf.Variable)):
        if count is not None:
            if not (count.dtype.is_integer or count.dtype.is_floating):
                raise TypeError("StepStatHook: count must be numeric, got "
                                "a %s tensor" % count.dtype.name)
            if count.shape.rank not in (None, 0):
                raise ValueError("StepStatHook: count must be a scalar, got "
                                 "shape %s" % count.shape)
        return count
    if isinstance(count, bool) or not isinstance(count, numbers.Real):
        raise TypeError("StepStatHook: count expects a number or a scalar "
                        "tensor, got %r (%s)" % (count, type(count).__name__))
    if count < 0:
        raise ValueError("StepStatHook: count must be >= 0, got %r" % count)
    return count


class StepStatHook(_V1.train.SessionRunHook):
    """Logs per-step statistics every ``every_n_iter`` steps (see the
    module docstring).

    Args:
        every_n_iter: steps per logged window; None: one line at the end
            of the session.
        count: what one step processes: a number (the batch size), or a
            scalar numeric tensor fetched with every step (e.g.
            ``tf.shape(batch)[0]`` for batches of varying size); None:
            no rate is logged.
        unit: the name of the counted thing; the rate is logged as
            ``<unit>s/sec``.

    Raises:
        TypeError: ``every_n_iter`` is not an int, ``count`` is neither a
            number nor a numeric tensor (an Operation has no value), or
            ``unit`` is not a string.
        ValueError: ``every_n_iter`` < 1, a negative ``count``, or a
            ``count`` tensor that is not a scalar.
    """

    def __init__(self, every_n_iter: Optional[int] = None,
                 count: Union[None, float, tf.Tensor] = None,
                 unit: str = "sample") -> None:
        if every_n_iter is not None:
            if isinstance(every_n_iter, bool) or \
                    not isinstance(every_n_iter, numbers.Integral):
                raise TypeError("StepStatHook: every_n_iter expects an int or "
                                "None, got %r" % (every_n_iter,))
            if every_n_iter < 1:
                raise ValueError("StepStatHook: every_n_iter must be >= 1, "
                                 "got %d" % every_n_iter)
        if not isinstance(unit, str):
            raise TypeError("StepStatHook: unit expects a str, got %r" % (
                unit,))
        self._every_n_iter = every_n_iter
        self._count = _check_count(count)
        self._fetch = isinstance(self._count, (tf.Tensor, tf.Variable))
        self._unit = unit
        self._reset()

    def _reset(self) -> None:
        # The current window: one entry per step since the last line.
        self._durations: List[float] = []
        self._counts: List[float] = []
        self._started: Optional[float] = None

    def _log_window(self) -> None:
        counts = self._counts if self._count is not None else None
        _V1.logging.info(window_summary(self._durations, counts, self._unit))
        self._durations, self._counts = [], []

    def begin(self) -> None:
        """Starts with an empty window (a hook may serve several
        sessions, one after another)."""
        self._reset()

    def before_run(self, run_context: Any) -> Any:
        """Starts timing the step.

        Args:
            run_context: the step's SessionRunContext (unused).

        Returns:
            SessionRunArgs fetching ``count`` when it is a tensor, else
            None.
        """
        del run_context
        self._started = _clock()
        if self._fetch:
            return _V1.train.SessionRunArgs(self._count)
        return None

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Records the step; logs the window when it is complete.

        Args:
            run_context: the step's SessionRunContext (unused).
            run_values: the step's SessionRunValues (``count``'s value).
        """
        del run_context
        self._durations.append(_clock() - self._started)
        if self._count is not None:
            self._counts.append(float(run_values.results) if self._fetch
                                else float(self._count))
        if (self._every_n_iter is not None
                and len(self._durations) == self._every_n_iter):
            self._log_window()

    def end(self, session: Any) -> None:
        """Logs the steps of the unfinished window, if any.

        Args:
            session: the session being closed (unused).
        """
        del session
        if self._durations:
            self._log_window()
