"""CollectiveCheckpointSaverHook: MonitoredTrainingSession's checkpoint
hook for graphs with sharded tables, run on every rank (the save is
collective, save_protocol.py); rank 0 alone writes.
"""
from typing import Any

import hbcore
import tensorflow as tf

from hbcore_tf._patches import internals

_V1 = tf.compat.v1


class _NullSummaryWriter:
    def add_graph(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_meta_graph(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_session_log(self, *args: Any, **kwargs: Any) -> None:
        pass


class CollectiveCheckpointSaverHook(_V1.train.CheckpointSaverHook):
    """CheckpointSaverHook run on EVERY rank of a graph with sharded tables
    (the save is collective); rank 0 alone writes the checkpoint, the
    graph and the summaries, and runs the listeners.

    With ``save_secs``, rank 0's timer decides and the decision is
    broadcast every step (one tiny collective), so all ranks save at the
    same step; ``save_steps`` needs no collective.

    Args:
        writer: whether this rank writes (rank 0); other arguments as
            tf.compat.v1.train.CheckpointSaverHook's.
    """

    def __init__(self, checkpoint_dir: str, writer: bool,
                 **kwargs: Any) -> None:
        if not writer:
            kwargs["listeners"] = None
        super().__init__(checkpoint_dir, **kwargs)
        self._hb_writer = writer
        self._hb_by_secs = kwargs.get("save_secs") is not None

    def begin(self) -> None:
        """Sets the hook up; a non-writer only reads the global step and
        gets a summary writer that writes nothing."""
        if self._hb_writer:
            super().begin()
            return
        self._summary_writer = _NullSummaryWriter()
        # What CheckpointSaverHook.begin reads the step with.
        self._global_step_tensor = internals.GLOBAL_STEP_READ.load()()

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Saves the initial checkpoint (collective: on every rank).

        The writer also writes the graph and meta graph, as
        CheckpointSaverHook does.

        Args:
            session: the session just created.
            coord: its coordinator (passed on by the writer only).
        """
        if self._hb_writer:
            super().after_create_session(session, coord)
            return
        step = session.run(self._global_step_tensor)
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Saves when due; with ``save_secs``, as rank 0's timer decides.

        Args:
            run_context: the step's SessionRunContext (its session saves;
                a listener may request a stop through it).
            run_values: the step's SessionRunValues (the global step read
                before the step; used without ``save_secs`` only).
        """
        if not self._hb_by_secs:
            super().after_run(run_context, run_values)
            return
        step = run_context.session.run(self._global_step_tensor)
        due = (self._timer.should_trigger_for_step(step)
               if self._hb_writer else None)
        if hbcore.broadcast_object(due, 0, name="hbcore.checkpoint_due"):
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()


