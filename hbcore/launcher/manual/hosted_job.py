"""The driver's side of a job of hosted ranks (Spark tasks, Ray actors).

The driver (the process that calls ``hbcore.spark.run`` or holds a
``RayExecutor``) is the rendezvous' coordinator: it listens on a free
port, its hosts (hosted_rank.py) join as members ``rank:0`` ..
``rank:<size-1>`` with one worker each, and once all have arrived it runs
``mpiexec -launcher manual`` for them under the supervisor
(placed_job.run_placed) on a thread of its own. Ranks are the hosts'
indexes. The variables every rank gets (``env``, NIC choice) travel in
mpiexec's per-rank segments, as data to hydra, not through the hosts.

Every host learns the job's end (the first failure, or success) from the
rendezvous; the driver reads it from ``wait``.
"""

import os
import queue
import sys
import threading
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    TextIO, Tuple)

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.manual.hosted_rank import MemberSpec, member_name
from hbcore.launcher.manual.placed_job import run_placed
from hbcore.launcher.manual.rendezvous import Coordinator, RendezvousError
from hbcore.launcher.mpiexec import wrapped_command
from hbcore.launcher.outcome import collect, placed_job_report
from hbcore.launcher.rank import RANK_SERVER
from hbcore.launcher.rank.rank_status import RankStatus
from hbcore.launcher.supervisor import LaunchResult


class HostedJob:
    """A coordinator and its mpiexec for ``size`` hosted ranks.

    Args:
        size: Number of hosts (ranks).
        what: What a host is, for messages: ``"Spark task"``.
        program: Name starting report lines: ``"hbcore.spark.run"``.
        start_timeout: Seconds for every host to arrive.
        env: Variables for every rank.
        executable: The ranks' Python (default: sys.executable).
        mpi_args: Extra mpiexec arguments.
        verbose: Print the mpiexec command line.
        stdout: Stream for the ranks' stdout (default: sys.stdout).
        stderr: Stream for the ranks' stderr (default: sys.stderr).
        timestamp: Prefix the ranks' output lines with the time.
        events: The supervisor's event queue (default: a new one); an
            elastic driver's poller puts its aborts there.
        seen, settle_for: As ``supervisor.supervise``'s (the elastic
            driver reads every rank status of a generation).

    Raises:
        RendezvousError: No port to listen on.
    """

    def __init__(self, size: int, what: str, program: str,
                 start_timeout: float,
                 env: Optional[Mapping[str, str]] = None,
                 executable: Optional[str] = None,
                 mpi_args: Sequence[str] = (), verbose: bool = False,
                 stdout: Optional[TextIO] = None,
                 stderr: Optional[TextIO] = None,
                 timestamp: bool = False,
                 events: Optional["queue.Queue"] = None,
                 seen: Optional[List[RankStatus]] = None,
                 settle_for: Optional[Callable[[RankStatus], float]] = None
                 ) -> None:
        self.size = size
        self.program = program
        self._what = what
        self._start_timeout = start_timeout
        self._env = {str(k): str(v) for k, v in (env or {}).items()}
        self._mpi_args = list(mpi_args)
        self._verbose = verbose
        self._streams = (stdout, stderr)
        self._rank_command = wrapped_command(
            [executable or sys.executable, RANK_SERVER], None, timestamp)
        self._secret = os.urandom(32)
        # A fresh id keeps hosts of an earlier job of this driver out.
        self._job = {"id": os.urandom(16).hex(), "program": program,
                     "rank_command": self._rank_command}
        self._events: "queue.Queue" = (queue.Queue() if events is None
                                       else events)
        self._seen = seen
        self._settle_for = settle_for
        self._members = [member_name(i) for i in range(size)]
        self._coordinator = Coordinator(
            self._members, self._job, self._secret, ("", 0), start_timeout,
            describe=self.describe,
            on_failure=lambda why: self._events.put(("abort", why)))
        self.result: Optional[LaunchResult] = None
        self._end: Tuple[int, str] = (1, "the job did not end")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="hosted-job")
        self._thread.start()

    def describe(self, member: str) -> str:
        """``Spark task 1`` for member ``rank:1``."""
        return "%s %s" % (self._what, member.partition(":")[2])

    def spec(self, host: str) -> MemberSpec:
        """What every host needs to join (data only).

        Args:
            host: This driver's address as the hosts reach it.
        """
        return MemberSpec(host, self._coordinator.port, self._secret.hex(),
                          dict(self._job), float(self._start_timeout))

    def _run(self) -> None:
        try:
            placements = self._coordinator.wait_for_members()
        except RendezvousError as exc:
            self._end = (1, "%s: error: %s" % (self.program, exc))
            return  # every host that arrived was told
        segments: List[Dict[str, str]] = [dict(self._env)
                                          for _ in range(self.size)]
        try:
            self.result = run_placed(
                self._coordinator, placements, segments, self._rank_command,
                self._mpi_args, os.environ, self._events, self._verbose,
                self.program, *self._streams, seen=self._seen,
                settle_for=self._settle_for)
        except LauncherError as exc:
            self._end = (1, "%s: error: %s" % (self.program, exc))
            self._coordinator.end(*self._end)
            return
        places = [self.describe(member_name(rank))
                  for rank in range(self.result.np)]
        self._end = (self.result.exit_code, placed_job_report(
            self.result, self.program, places, "; stopped the job"))
        self._coordinator.end(*self._end)

    def abort(self, why: str) -> None:
        """Stops the job (its ranks on every host) from any thread."""
        self._coordinator.abort(why)
        self._events.put(("abort", why))

    def wait(self, timeout: Optional[float] = None) -> Tuple[int, str]:
        """Waits for the job's end.

        Args:
            timeout: Seconds; None waits as long as it takes.

        Returns:
            (exit code, report line), the line "" on success.

        Raises:
            TimeoutError: The job had not ended in time.
        """
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("%s: the job did not end within %gs"
                               % (self.program, timeout))
        return self._end

    def results(self, outcomes: Mapping[int, Tuple[str, Any]]) -> List[Any]:
        """The ranks' values in rank order, or the job's error
        (outcome.collect).

        Args:
            outcomes: Rank -> its call's outcome (hosted_rank.py).

        Returns:
            The values, in rank order.

        Raises:
            RuntimeError: As outcome.collect.
        """
        first = self.result.first_failure if self.result else None
        return collect(self.program, self.size, outcomes,
                       None if first is None else first.rank, self._end[1],
                       self._end[0])
