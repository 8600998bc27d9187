"""``hb.train.Server`` and ``hb.train.device_setter``.

HybridBackend started a gRPC ``tf.distribute.Server`` per process. hbcore
carries every collective itself (MPI under hbrun), so no TF cluster is
needed: the server is a stand-in whose ``target`` is the local target
(``""``), which ``MonitoredTrainingSession`` accepts.
"""
from typing import Any, Optional

from hbcore_tf._base.context import context
from hbcore_tf.train.session import MonitoredTrainingSession


class Server:
    """A stand-in for tf.distribute.Server (see the module docstring).

    Args:
        *args, **kwargs: accepted and ignored (HybridBackend passed the
            cluster spec and task here; hbcore takes them from hbrun).
    """

    _default: Optional["Server"] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        del args, kwargs

    @classmethod
    def get(cls) -> "Server":
        """The process's default server (HybridBackend's ``Server.get()``).

        Returns:
            The same Server on every call.
        """
        if cls._default is None:
            cls._default = cls()
        return cls._default

    @property
    def target(self) -> str:
        """The session target: ``""``, this process's local runtime."""
        return ""

    def start(self) -> None:
        """Nothing to start."""

    def join(self) -> None:
        """Returns at once: there is no parameter-server role to serve."""

    def monitored_session(self, **kwargs: Any) -> Any:
        """HybridBackend's ``Server.monitored_session(**kwargs)``:
        ``hb.train.MonitoredTrainingSession(master=self.target, **kwargs)``
        created inside ``hb.scope()`` (as HybridBackend opens its scope
        around it, so the scaffold's default Saver records relative paths).

        Args:
            **kwargs: every argument of hb.train.MonitoredTrainingSession
                but ``master``.

        Returns:
            A MonitoredSession.
        """
        # hb.scope installs hb.train.MonitoredTrainingSession for
        # tf.compat.v1.train, so hbcore_tf.scope imports this package: it
        # is imported here, at call time, not when this module loads.
        from hbcore_tf.scope import scope

        with scope():
            return MonitoredTrainingSession(master=self.target, **kwargs)


def monitored_session(**kwargs: Any) -> Any:
    """HybridBackend's ``hb.train.monitored_session(**kwargs)``: the data-
    parallel MonitoredTrainingSession of the default server
    (``Server.get().monitored_session(**kwargs)``), which HybridBackend's
    own tests and examples open with ``with hb.train.monitored_session(
    hooks=..., checkpoint_dir=..., eval_fn=...) as sess``.

    Args:
        **kwargs: every argument of hb.train.MonitoredTrainingSession but
            ``master``.

    Returns:
        A MonitoredSession.
    """
    return Server.get().monitored_session(**kwargs)


def device_setter(*args: Any, **kwargs: Any) -> str:
    """This rank's placement, for ``with tf.device(hb.train.device_setter())``:
    ``/device:GPU:<i>`` when the rank has a GPU, else ``/device:CPU:0``.
    Arguments (HybridBackend's replica_device_setter ones) are ignored.
    """
    del args, kwargs
    return context.current_device()
