"""A member of the rendezvous that hosts one rank: a Spark task's or a Ray
actor's side of a job (the driver's side is hosted_job.py).

The hosting process (started by Spark or Ray, not by hydra) cannot be an
MPI rank itself. It joins the rendezvous as member ``rank:<index>`` with
one worker, starts hydra's proxy from the data the coordinator sent
(placed_job.LocalProxy), and the proxy starts the rank: rank_server.py,
which connects back to this host over hbcore's authenticated wire
(wire.py, on 127.0.0.1) and runs the calls the host passes it (protocol
in rank_server.py).

What the host gets from the driver (``MemberSpec``) is data only: the
coordinator's address, the job's secret and description, a start timeout.

Outcomes of a call: run_task.py's ``("ok", value)`` and ``("error",
info)``, or ``("lost", {"message"})`` when the job ended before this rank
answered (another rank failed first, a launcher went away, the rendezvous
failed); the driver's report says which.
"""

import os
import queue
import threading
from typing import Any, NamedTuple, Optional, Tuple

import cloudpickle

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.manual.hydra_manual import find_proxy
from hbcore.launcher.manual.placed_job import LocalProxy
from hbcore.launcher.manual.rendezvous import Member, RendezvousError
from hbcore.launcher.mpiexec import find_mpiexec
from hbcore.launcher.rank import wire
from hbcore.launcher.rank.rank_server import (ADDRESS_VAR, CONTEXT, KEY_VAR,
                                              MAX_CALL)

# How often a waiting host looks up to see whether the job has ended.
_POLL_S = 0.2
# How long a host whose rank connection broke waits for the job's end
# message, which names the cause, before it reports the break itself.
_END_WAIT_S = 30.0


class MemberSpec(NamedTuple):
    """What every host of a job receives from the driver (data only).

    Attributes:
        host: The coordinator's host, as the hosts reach it.
        port: Its rendezvous port.
        secret: The job's rendezvous secret, hex.
        job: The job description every member sends.
        start_timeout: Seconds to reach the coordinator and start.
    """
    host: str
    port: int
    secret: str
    job: dict
    start_timeout: float


def member_name(index: int) -> str:
    """The rendezvous name of the host of index ``index``."""
    return "rank:%d" % index


def lost(message: str) -> Tuple[str, dict]:
    """The outcome of a call the job ended under."""
    return ("lost", {"message": message})


class HostedRank:
    """One hosted rank's lifetime: ``start``, ``call`` any number of times,
    ``stop``. Not thread-safe: one caller at a time.

    Args:
        spec: From the driver.
        index: This host's index (its rank: every host has one worker).
    """

    def __init__(self, spec: MemberSpec, index: int) -> None:
        self._spec = spec
        self._index = index
        self._key = os.urandom(32)
        self._listener: Optional[wire.Listener] = None
        self._member: Optional[Member] = None
        self._proxy: Optional[LocalProxy] = None
        self._connection: Optional[wire.Connection] = None
        self._accepted: "queue.Queue" = queue.Queue()
        self._stopped = threading.Event()
        self._ended = threading.Event()
        self._end: Tuple[int, str] = (1, "the job did not start")

    @property
    def end(self) -> Optional[Tuple[int, str]]:
        """The job's (exit code, message) once it ended, else None."""
        return self._end if self._ended.is_set() else None

    def start(self) -> int:
        """Joins the job and waits until its rank is up.

        Returns:
            The rank.

        Raises:
            RendezvousError: The job could not be formed (the message says
                why; the same on every host).
            LauncherError: hydra's tools are missing here.
        """
        spec = self._spec
        self._listener = wire.Listener(self._key, CONTEXT, self._hold,
                                       max_frame=MAX_CALL)
        env = dict(os.environ)
        env[ADDRESS_VAR] = "127.0.0.1:%d" % self._listener.port
        env[KEY_VAR] = self._key.hex()
        proxy = find_proxy(find_mpiexec(env))
        self._member = Member(member_name(self._index), 1, None, spec.job,
                              bytes.fromhex(spec.secret),
                              (spec.host, spec.port), spec.start_timeout)
        start = self._member.join()
        self._proxy = LocalProxy(proxy, spec.host, start, env)
        threading.Thread(target=self._watch_end, daemon=True,
                         name="hosted-rank-end").start()
        while True:
            try:
                self._connection = self._accepted.get(timeout=_POLL_S)
                return start.first_rank
            except queue.Empty:
                pass
            if self._ended.is_set():
                raise RendezvousError(self._end[1] or "the job ended before "
                                      "rank %d started" % start.first_rank)
            self._proxy.refresh()

    def _hold(self, connection: wire.Connection) -> None:
        """The listener's handler: hands the rank's (authenticated)
        connection over and keeps it open until stop()."""
        self._accepted.put(connection)
        self._stopped.wait()

    def _watch_end(self) -> None:
        self._end = self._member.wait_for_end(None)
        self._ended.set()

    def call(self, payload: bytes) -> Tuple[str, Any]:
        """Runs one call on the rank (rank_server.py's protocol).

        Args:
            payload: The cloudpickled call.

        Returns:
            The outcome (see the module docstring).
        """
        if self._connection is None or self._ended.is_set():
            return lost(self._end[1] or "the job has ended")
        try:
            self._connection.send_bytes(payload)
            while not self._connection.poll(_POLL_S):
                if self._ended.is_set() and not self._connection.poll(0):
                    return lost(self._end[1])
                self._proxy.refresh()
            reply = self._connection.receive_bytes()
            if reply is None:
                raise EOFError("the rank closed its connection")
            # Unpickled only because the wire authenticated the rank.
            return cloudpickle.loads(reply)
        except (EOFError, OSError):
            # The rank is gone; the job's end says why.
            self._ended.wait(_END_WAIT_S)
            return lost(self._end[1] if self._ended.is_set() else
                        "rank %d ended during a call" % self._index)

    def stop(self) -> Tuple[int, str]:
        """Ends the rank, waits for the job's end, leaves nothing running.

        Returns:
            The job's (exit code, message), the same on every host.
        """
        try:
            if self._connection is not None:
                try:
                    self._connection.send_bytes(cloudpickle.dumps(None))
                except OSError:
                    pass
            self._stopped.set()  # the listener closes the connection
            if self._member is not None and self._proxy is not None:
                self._ended.wait()
        finally:
            if self._member is not None:
                self._member.close()
            if self._proxy is not None:
                self._proxy.stop()
            if self._listener is not None:
                self._listener.close()
        return self._end


def run_once(spec: MemberSpec, index: int, payload: bytes
             ) -> Tuple[int, Tuple[str, Any]]:
    """Hosts a rank for one call (a Spark task's whole part).

    Args:
        spec: From the driver.
        index: This host's index.
        payload: The cloudpickled call.

    Returns:
        (index, outcome); failures are outcomes, never exceptions, so the
        driver reports every host's side.
    """
    rank = HostedRank(spec, index)
    try:
        rank.start()
        outcome = rank.call(payload)
    except LauncherError as exc:  # RendezvousError is one
        outcome = lost(str(exc))
    finally:
        rank.stop()
    return index, outcome
