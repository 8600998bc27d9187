"""What the rank wrapper and the launcher share: the status line a wrapper
writes when its rank ends (``STATUS_MARKER`` + JSON on stderr, read by the
launcher's output relay, output.py), and the parent-death signal both use
so that a child never outlives the process that started it.

Standard library only: the rank wrapper imports it when run by path
(rank_wrapper.py says why).
"""

import json
import os
import signal
import sys
from typing import Callable, List, NamedTuple, Optional

# Starts a status line on the wrapper's stderr; chosen so that no program
# prints it by accident.
STATUS_MARKER = b"@@hbrun-rank-status@@ "


class RankStatus(NamedTuple):
    """How a rank's process ended, as reported by its wrapper.

    Exactly one of ``exit_code`` and ``signal`` is set.  ``hung`` says
    why the wrapper killed a rank that hung (hang_watch.py), else None.
    ``stalled`` lists the ranks that the core's stall shutdown found stuck
    in their own code, when that made this rank leave an elastic world
    (elastic_protocol.py's stalled marker), else None.
    """
    rank: int
    exit_code: Optional[int]
    signal: Optional[int]
    host: str
    pid: int
    time: float
    hung: Optional[str] = None
    stalled: Optional[List[int]] = None

    def describe(self) -> str:
        """Returns e.g. ``"exited with code 3"``, ``"killed by signal
        SIGKILL (9)"`` or, for a hung rank, ``"killed by signal SIGKILL (9)
        by hbrun: it made no progress: stopped (state T) for 2.0 s (limit:
        --elastic-timeout 2)"``."""
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = "signal %d" % self.signal
            killed = "killed by signal %s (%d)" % (name, self.signal)
            if self.hung is not None:
                return "%s by hbrun: %s" % (killed, self.hung)
            return killed
        return "exited with code %d" % self.exit_code

    @property
    def shell_code(self) -> int:
        """The exit code a shell would report: the code, or 128 + signal."""
        if self.signal is not None:
            return 128 + self.signal
        return int(self.exit_code)


def format_status(status: RankStatus) -> bytes:
    """Encodes a status as one line for the wrapper's stderr.

    Args:
        status: The rank's status.

    Returns:
        ``STATUS_MARKER`` followed by JSON and a newline.
    """
    return STATUS_MARKER + json.dumps(status._asdict()).encode() + b"\n"


def parse_status(line: bytes) -> Optional[RankStatus]:
    """Decodes a status line written by ``format_status``.

    Args:
        line: One line of mpiexec's stderr.

    Returns:
        The status, or None if the line is not a (well formed) status line.
    """
    if not line.startswith(STATUS_MARKER):
        return None
    try:
        fields = json.loads(line[len(STATUS_MARKER):].decode())
        return RankStatus(**fields)
    except (ValueError, TypeError):
        return None


def parent_death_preexec(signum: int = signal.SIGKILL
                          ) -> Optional[Callable[[], None]]:
    """Returns a ``preexec_fn`` that makes a child get ``signum`` when the
    process (strictly: the thread) that started it dies.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere returns None.  Only
    use it while the calling process runs a single thread: the function runs
    between fork and exec, where another thread's locks are unusable.

    Args:
        signum: Signal the child gets when its parent dies.

    Returns:
        The preexec function, or None where it is not supported.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        # Resolved here, before fork: loading a library in the forked child
        # is not safe.
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signum))
        # The parent may have died between fork() and prctl().
        if os.getppid() != parent:
            os.kill(os.getpid(), int(signum))
    return preexec
