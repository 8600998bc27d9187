"""tf.compat.v1 session hooks (horovod.tensorflow's
BroadcastGlobalVariablesHook)."""
from typing import Any, Optional

import tensorflow as tf

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

        Args:
            session: the tf.compat.v1.Session just created.
            coord: the session's Coordinator (unused).
        """
        session.run(self.bcast_op)
