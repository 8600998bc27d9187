"""hbrun-side output handling: relay mpiexec's output, catch rank statuses.

mpiexec's stdout and stderr carry every rank's output, already prefixed
line by line by the rank wrappers (``[1]<stdout>:text``, see
rank_output.py), plus hydra's own messages, plus the wrappers' status lines
(rank_wrapper.STATUS_MARKER).  A relay thread per stream passes output
lines through, and hands status lines to the supervisor instead of
printing them.

While the supervisor tears the job down after a failure, lines without a
rank prefix are dropped: they come from hydra, whose "BAD TERMINATION"
banner then names the wrong process and the exit code of our own SIGTERM,
and would bury the one line that says what really failed.
"""

import re
import threading
from typing import BinaryIO, Callable, Optional, TextIO

from hbcore.launcher.rank.rank_status import (STATUS_MARKER, RankStatus,
                                              parse_status)

_RANK_PREFIXED = re.compile(rb"^\[\d+\]<std(?:out|err)>:")


def make_sink(stream: TextIO) -> Callable[[bytes], None]:
    """Returns a function writing raw output lines to a text stream.

    Bytes go to ``stream.buffer`` when there is one (so output passes
    through unchanged), else they are decoded as UTF-8 with replacement.

    Args:
        stream: E.g. sys.stdout (looked up when called, not later).

    Returns:
        A function taking one line of bytes.
    """
    buffer = getattr(stream, "buffer", None)

    def write(data: bytes) -> None:
        try:
            if buffer is not None:
                stream.flush()  # keep order with text already written
                buffer.write(data)
                buffer.flush()
            else:
                stream.write(data.decode("utf-8", errors="replace"))
                stream.flush()
        except (OSError, ValueError):
            pass  # closed or broken stream: keep draining the pipe anyway
    return write


class OutputRelay(threading.Thread):
    """Copies one of mpiexec's output pipes to a sink, line by line.

    Args:
        pipe: mpiexec's stdout or stderr (binary, read until EOF).
        sink: Called with each output line to show.
        on_status: Called with each rank status line found in the stream.
        quiet: While set, lines without a rank prefix are dropped.
        intercept: Sees every line first; lines it returns True for are
            consumed (not shown).
    """

    def __init__(self, pipe: BinaryIO, sink: Callable[[bytes], None],
                 on_status: Callable[[RankStatus], None],
                 quiet: Optional[threading.Event] = None,
                 intercept: Optional[Callable[[bytes], bool]] = None
                 ) -> None:
        super().__init__(daemon=True)
        self._intercept = intercept
        self._pipe = pipe
        self._sink = sink
        self._on_status = on_status
        self._quiet = quiet or threading.Event()

    def run(self) -> None:
        """Relays the pipe until EOF; the thread's body.

        Lines that parse as rank statuses go to ``on_status``; the others
        go to the sink, except lines without a rank prefix while ``quiet``
        is set. OSError and ValueError (the pipe closed during teardown)
        end the relay silently.
        """
        try:
            for line in iter(self._pipe.readline, b""):
                if self._intercept is not None and self._intercept(line):
                    continue
                if line.startswith(STATUS_MARKER):
                    status = parse_status(line)
                    if status is not None:
                        self._on_status(status)
                        continue
                if self._quiet.is_set() and not _RANK_PREFIXED.match(line):
                    continue
                self._sink(line)
        except (OSError, ValueError):
            pass  # pipe closed under us during teardown
