"""tf.compat.v1 session hooks (horovod.tensorflow's
BroadcastGlobalVariablesHook)."""
from typing import Any, Optional

import tensorflow as tf

from hbcore.exceptions import ShutdownError
from hbcore_tf.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts every global variable from ``root_rank`` right after the
    session is created, so all ranks start from the same weights (random
    initialization or a checkpoint restored on the root).

    Use with tf.compat.v1.train.MonitoredTrainingSession (or any
    SessionRunHook-aware session).

    Args:
        root_rank: rank whose variable values are kept.
        device: device for the broadcast ('' = default placement).
    """

    def __init__(self, root_rank: int, device: str = "") -> None:
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op: Optional[tf.Operation] = None

    def begin(self) -> None:
        """Builds the broadcast op in the current default graph."""
        # begin() runs once per graph the hook is used with; build the
        # broadcast in the current default graph (again if it changed).
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Runs the broadcast op in the new session.

        hbcore's TF ops fail with tf.errors.UnknownError once the runtime
        has shut down (a peer failed, or the stall shutdown), as Horovod's
        do. Here that error is raised as hbcore.ShutdownError saying that
        the session cannot be created, with the runtime's reason and
        without the graph's node context.

        Args:
            session: the tf.compat.v1.Session just created.
            coord: the session's Coordinator (unused).

        Raises:
            hbcore.ShutdownError: hbcore has shut down.
        """
        try:
            session.run(self.bcast_op)
        except tf.errors.UnknownError as exc:
            # The broadcast's only UnknownError: hbcore's shutdown.
            reason = _op_reason(exc)
            if not reason.startswith("hbcore has shut down"):
                reason = "hbcore has shut down: " + reason
            raise ShutdownError(
                "cannot create the session: rank %d's variables cannot be "
                "broadcast (a session created again would fail the same "
                "way): %s" % (self.root_rank, reason)) from exc


def _op_reason(exc: Any) -> str:
    """The message an op raised ``exc`` with, without the graph context
    tf.compat.v1.Session adds (the node's stack; ``[[{{node ...}}]]``)."""
    inner = exc
    while isinstance(inner.__context__, tf.errors.OpError):
        inner = inner.__context__
    lines = [line.strip() for line in inner.message.splitlines()
             if line.strip() and not line.strip().startswith("[[")]
    return " ".join(lines) or exc.message
