"""Running a placed rendezvous job: mpiexec on the coordinator, proxies on
the members.

The rendezvous (rendezvous.py) only decides who is in the job and where
each member's ranks go. Every front end (TF_CONFIG machines, Spark tasks,
Ray actors) then does the same two things, written here once:

- the coordinator runs ``mpiexec -launcher manual`` for the placements
  under the supervisor (first-failure teardown), turns hydra's
  ``HYDRA_LAUNCH:`` lines into proxy data, sends each member its start
  message when hydra has printed them all (``run_placed``);
- a member starts its own ``hydra_pmi_proxy`` from the validated data it
  received and, when the job has ended, stops whatever is left of it
  (``LocalProxy``).
"""

import collections
import queue
import subprocess
import sys
import threading
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TextIO

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.manual.hydra_manual import (LAUNCH_END, LAUNCH_PREFIX,
                                                 ProxyData, manual_command,
                                                 parse_launch_line,
                                                 proxy_command)
from hbcore.launcher.manual.rendezvous import Coordinator, Placement, Start
from hbcore.launcher.mpiexec import find_mpiexec
from hbcore.launcher.rank.rank_status import RankStatus
from hbcore.launcher.supervisor import (TERMINATE_GRACE_S, LaunchResult,
                                        ProcessTree, supervise)

# How long a member lets its proxy stop by itself after the job ended
# (hydra stops it when mpiexec goes) before stopping it.
PROXY_EXIT_S = 2.0


def host_label(member: str) -> str:
    """Hydra's host label of a member: ``worker:1`` -> ``worker-1``."""
    return member.replace(":", "-")


def run_placed(coordinator: Coordinator, placements: List[Placement],
               segments: List[Dict[str, str]], rank_command: List[str],
               mpi_args: Sequence[str], environ: Mapping[str, str],
               events: "queue.Queue", verbose: bool = False,
               program: str = "hbrun",
               stdout: Optional[TextIO] = None,
               stderr: Optional[TextIO] = None,
               seen: Optional[List[RankStatus]] = None,
               settle_for: Optional[Callable[[RankStatus], float]] = None
               ) -> LaunchResult:
    """Runs the job of placed members until it ends (steps 6-7 of the
    rendezvous, the coordinator's side); the caller reports its end.

    Args:
        coordinator: The rendezvous, every member arrived.
        placements: From ``coordinator.wait_for_members()``.
        segments: One dict of variables per rank, in rank order.
        rank_command: What every rank runs (the rank wrapper's command).
        mpi_args: Extra mpiexec arguments.
        environ: mpiexec's environment (it finds hydra's tools there).
        events: The supervisor's queue; ``("abort", why)`` stops the job.
        verbose: Print the mpiexec command line.
        program: Name for the verbose line.
        stdout: Stream for the ranks' stdout (default: sys.stdout).
        stderr: Stream for the ranks' stderr (default: sys.stderr).
        seen, settle_for: As ``supervisor.supervise``'s.

    Returns:
        The supervisor's outcome; no process of the job is left here.

    Raises:
        LauncherError: mpiexec cannot be started.
    """
    hosts = ["%s:%d" % (host_label(p.arrival.name), p.arrival.workers)
             for p in placements]
    command = manual_command(find_mpiexec(environ), hosts, segments,
                             rank_command, list(mpi_args))
    proxies: Dict[str, ProxyData] = {}

    def intercept(line: bytes) -> bool:
        # Hydra's manual-launch lines become data for the members; they are
        # never shown, nor run here.
        text = line.decode("utf-8", "replace").rstrip("\n")
        try:
            if text.startswith(LAUNCH_PREFIX):
                data = parse_launch_line(text)
                proxies[placements[data.proxy_id].arrival.name] = data
                return True
            if text.strip() == LAUNCH_END:
                coordinator.start(proxies, placements)
                return True
        except (LauncherError, IndexError, KeyError) as exc:
            events.put(("abort", "cannot start the proxies: %s" % exc))
            return True
        return False

    if verbose:
        sys.stderr.write("%s: %s\n" % (program, " ".join(command)))
    world = sum(p.arrival.workers for p in placements)
    return supervise(command, world, environ=environ,
                     stdin=subprocess.DEVNULL, intercept=intercept,
                     events=events, stdout=stdout, stderr=stderr, seen=seen,
                     settle_for=settle_for)


class LocalProxy:
    """A member's hydra proxy (the member's side of step 6).

    Args:
        proxy: This machine's ``hydra_pmi_proxy``.
        control_host: The coordinator's host, as this member reaches it.
        start: The validated start message.
        env: The proxy's environment, which hydra gives this member's
            ranks (the coordinator's mpiexec passes none of its own).
        preexec: Run in the child before exec (e.g. a parent-death
            signal), or None.
    """

    def __init__(self, proxy: str, control_host: str, start: Start,
                 env: Mapping[str, str],
                 preexec: Optional[Callable[[], None]] = None) -> None:
        # The ranks' output reaches the coordinator's mpiexec through
        # hydra; the proxy's own lines are held back. They are shown only
        # when a member loses its coordinator: at every other end the
        # coordinator's report says what happened, and a proxy whose
        # mpiexec was stopped prints hydra's "assert (!closed) failed".
        self.process = subprocess.Popen(
            proxy_command(proxy, control_host, start.proxy), env=dict(env),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=preexec)
        self._tree = ProcessTree(self.process.pid)
        self._lines: "collections.deque" = collections.deque(maxlen=20)
        threading.Thread(target=self._read, daemon=True,
                         name="proxy-output").start()

    def _read(self) -> None:
        try:
            for line in iter(self.process.stdout.readline, b""):
                self._lines.append(line.decode("utf-8", "replace").rstrip())
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        """The proxy's last lines, each after a newline and an indent."""
        return "".join("\n  " + line for line in list(self._lines))

    def refresh(self) -> None:
        """Remembers the proxy's ranks (they may become orphans)."""
        self._tree.refresh()

    def stop(self) -> None:
        """Waits briefly for the proxy to end by itself, then stops it and
        every rank of it still alive; returns when nothing is left."""
        try:
            self.process.wait(PROXY_EXIT_S)
        except subprocess.TimeoutExpired:
            pass
        if self._tree.alive():
            self._tree.terminate(TERMINATE_GRACE_S)
        self.process.wait()
