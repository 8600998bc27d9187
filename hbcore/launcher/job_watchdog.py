"""Ends a job whose launcher died: a small process that outlives a kill -9
of hbrun and stops the job's processes.

Why: mpiexec runs in a session of its own (so that a terminal's Ctrl-C
reaches only hbrun, which tears the job down in order). A launcher killed
with SIGKILL tears nothing down. A single-threaded launcher has the
kernel send mpiexec SIGTERM when it dies (``PR_SET_PDEATHSIG``,
supervisor.py), but a preexec function is unsafe in a process with
threads, and the elastic driver has them (host discovery, the change
notice server): after ``kill -9`` of an elastic hbrun, mpiexec, its
proxies and the ranks ran on, re-parented to init. The supervisor starts
this watchdog instead wherever it cannot use the death signal.

Protocol (the supervisor writes lines to the watchdog's stdin, a pipe no
other process holds: the job's processes do not inherit it):

- ``watch <pid>``: mpiexec started as ``<pid>``, leader of its own session
  and process group (the proxies and ranks it starts on this host are in
  that group).
- ``done``: the launch ended and was torn down; the watchdog exits.

End of input without ``done`` means the launcher died: the watchdog sends
SIGTERM to every watched process group (mpiexec then stops its proxies
and ranks on every host, as in a teardown), waits up to the grace period
for the groups to empty, then sends SIGKILL to what is left. It runs in a
session of its own, so signals for the launcher's terminal or process
group do not reach it.

    python -m hbcore.launcher.job_watchdog GRACE_SECONDS
"""
import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

# How often the watchdog checks whether the groups it signalled are empty.
_POLL_S = 0.05


class JobWatchdog:
    """The supervisor's side: starts the watchdog process and tells it what
    to watch (one watchdog per launch)."""

    def __init__(self, grace_s: float) -> None:
        """Starts the watchdog.

        Args:
            grace_s: Seconds between its SIGTERM and its SIGKILL.

        Raises:
            OSError: the watchdog process cannot be started.
        """
        self._proc: Optional[subprocess.Popen] = subprocess.Popen(
            [sys.executable, "-m", __name__, repr(float(grace_s))],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)

    def _send(self, line: str) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write((line + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the watchdog is gone: nothing to tell it

    def watch(self, pid: int) -> None:
        """Watches the process group led by ``pid``.

        Args:
            pid: mpiexec's process id (a session and group leader).
        """
        self._send("watch %d" % pid)

    def close(self) -> None:
        """The launch is over: the watchdog exits without signalling."""
        if self._proc is None:
            return
        self._send("done")
        proc, self._proc = self._proc, None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_groups(groups: List[int], signum: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(groups: List[int], grace_s: float) -> None:
    """SIGTERM to every group, SIGKILL to those not empty after grace_s."""
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = [g for g in groups if _group_alive(g)]
    while left and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        left = [g for g in left if _group_alive(g)]
    _signal_groups(left, signal.SIGKILL)


def main(argv: List[str]) -> int:
    """The watchdog process (see the module comment).

    Args:
        argv: [GRACE_SECONDS].

    Returns:
        The exit code (0).
    """
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    grace_s = float(argv[0]) if argv else 3.0
    groups: List[int] = []
    for raw in sys.stdin.buffer:
        words = raw.decode(errors="replace").split()
        if words == ["done"]:
            return 0
        if len(words) == 2 and words[0] == "watch" and words[1].isdigit():
            groups.append(int(words[1]))
    # End of input without "done": the launcher died.
    _stop(groups, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
