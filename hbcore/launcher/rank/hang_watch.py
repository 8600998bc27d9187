"""The rank wrapper's watch for a rank that hangs without dying.

A rank stopped by a signal (SIGSTOP, SIGTSTP, a debugger's stop: state T)
or stuck in the kernel (a dead NFS mount, a hung device: state D) makes
no progress and never exits.  Its peers block on it in their next
collective, and nothing else notices: the core's control collectives have
no timeout, so rank 0's stall check (which runs between them) never runs
either, and a job waits forever.  The wrapper runs on the rank's own host
and is its parent, so it can see what no one else can: the process's
scheduler state in ``/proc/<pid>/stat``.

The watch (``wait_watching``), one decision per poll:
1. The child exited: its return code, no hang.
2. Its state is T or D (HUNG_STATES): the hang started at the first poll
   that saw it so, unless a poll since saw it in any other state.
3. A hang that has lasted the limit: the child gets SIGKILL, and the
   wrapper reports it as a rank killed by that signal, with the reason
   (RankStatus.hung), so hbrun handles it as a dead rank (elastic: its host
   is blacklisted and the others go back to the last commit).
Its peers are never blamed: a rank waiting in a collective is running
(R, MPI's polling) or sleeping (S, the core's backoff), not T or D.

The limit (``hang_limit``): HB_STALL_SHUTDOWN_TIME_SECONDS when it is set
above 0 (``--stall-check-shutdown-time-seconds``, the bound a user already
gives a stall); else, under hbrun's elastic driver, the
``--elastic-timeout`` it passes in HB_ELASTIC_TIMEOUT_SECONDS (600 s by
default,
far above a long checkpoint or evaluation); else none: the wrapper only
waits, as before.  A hang is seen between the limit and the limit plus
two polls after it began.

Linux only (``/proc``); elsewhere the watch only waits.  Standard library
only: the wrapper runs this by file path (rank_wrapper.py).
"""

import os
import select
import signal
import subprocess
import time
from typing import Mapping, NamedTuple, Optional, Tuple

if __package__:
    from hbcore.launcher.rank.elastic_protocol import TIMEOUT_VAR
else:  # run by path (rank_wrapper.py)
    from elastic_protocol import TIMEOUT_VAR  # type: ignore

STALL_SHUTDOWN_VAR = "HB_STALL_SHUTDOWN_TIME_SECONDS"

# The states of a process that makes no progress, as ``ps`` names them.
HUNG_STATES = {"T": "stopped (state T)",
               "D": "in uninterruptible sleep (state D)"}
# Longest time between two looks at the child's state.
MAX_POLL_S = 1.0
# How long a SIGKILLed child may take to exit.  A process in state D
# exits only once its I/O returns; the wrapper reports it before that.
KILL_WAIT_S = 1.0


class HangLimit(NamedTuple):
    """How long a rank may hang, and the hbrun flag that said so (e.g.
    ``"--elastic-timeout 600"``)."""
    seconds: float
    source: str

    def poll_s(self) -> float:
        """Seconds between two looks at the child's state."""
        return min(MAX_POLL_S, self.seconds / 4)


def hang_limit(environ: Mapping[str, str]) -> Optional[HangLimit]:
    """The hang limit of a rank (see the module comment).

    Args:
        environ: The rank's environment.

    Returns:
        The limit, or None: no limit.  A value that is not a number is
        taken as unset here: the core refuses it at init with the
        variable named.
    """
    for name, flag in ((STALL_SHUTDOWN_VAR,
                        "--stall-check-shutdown-time-seconds"),
                       (TIMEOUT_VAR, "--elastic-timeout")):
        try:
            seconds = float(environ.get(name, ""))
        except ValueError:
            continue
        if seconds > 0:
            return HangLimit(seconds, "%s %g" % (flag, seconds))
    return None


def process_state(pid: int) -> Optional[str]:
    """The scheduler state of ``pid`` (``R``, ``S``, ``T``, ``D``, ...), or
    None if it cannot be read (gone, or no /proc)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # "pid (comm) state ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[0] if fields else None


def wait_watching(child: subprocess.Popen, limit: Optional[HangLimit]
                  ) -> Tuple[int, Optional[str]]:
    """Waits for the child to exit, killing it once it has hung for the
    limit (see the module comment).

    Args:
        child: The rank's process.
        limit: The hang limit, or None: just wait.

    Returns:
        (return code as Popen's: negative for a signal, why it was killed
        as hung or None).  A hung child that has not exited KILL_WAIT_S
        after its SIGKILL (state D) counts as killed by it.
    """
    if limit is None or process_state(child.pid) is None:
        return child.wait(), None
    exit_fd = _exit_fd(child.pid)
    try:
        return _watch(child, limit, exit_fd)
    finally:
        if exit_fd is not None:
            os.close(exit_fd)


def _exit_fd(pid: int) -> Optional[int]:
    """A pidfd of ``pid`` (readable once it exits), or None where there is
    none (Linux before 5.3, Python before 3.9)."""
    try:
        return os.pidfd_open(pid)  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None


def _exited_within(child: subprocess.Popen, seconds: float,
                   exit_fd: Optional[int]) -> Optional[int]:
    """The child's return code if it exits within ``seconds``, else None.

    With a pidfd the wait sleeps until the exit or the timeout, so the
    exit is seen at once; ``Popen.wait(timeout)`` instead polls every
    50 ms, which would delay every failure report by up to that."""
    if exit_fd is None:
        try:
            return child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None
    select.select([exit_fd], [], [], seconds)
    return child.poll()


def _watch(child: subprocess.Popen, limit: HangLimit,
           exit_fd: Optional[int]) -> Tuple[int, Optional[str]]:
    """wait_watching's loop (steps 1-3 of the module comment)."""
    hung_since: Optional[float] = None
    while True:
        code = _exited_within(child, limit.poll_s(), exit_fd)
        if code is not None:
            return code, None
        state = process_state(child.pid)
        now = time.monotonic()
        if state not in HUNG_STATES:
            hung_since = None
            continue
        if hung_since is None:
            hung_since = now
        if now - hung_since < limit.seconds:
            continue
        reason = "it made no progress: %s for %.1f s (limit: %s)" % (
            HUNG_STATES[state], now - hung_since, limit.source)
        child.send_signal(signal.SIGKILL)
        code = _exited_within(child, KILL_WAIT_S, exit_fd)
        if code is not None:
            return code, reason
        return -signal.SIGKILL, "%s; not exited %g s after SIGKILL" % (
            reason, KILL_WAIT_S)
