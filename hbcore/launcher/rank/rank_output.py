"""Rank-side output handling: prefix every line of a rank's output.

Each rank's stdout and stderr are read by the rank wrapper through pipes and
written to the wrapper's own stdout/stderr (which hydra forwards to hbrun)
with a rank prefix, in the same format as horovodrun::

    [1]<stdout>:text printed by rank 1
    [0]<stderr>:Traceback (most recent call last):

Why the wrapper does it rather than hydra's ``-prepend-rank``: hydra forwards
whatever chunks it reads, so lines of different ranks interleave mid-line
(``print`` under PYTHONUNBUFFERED writes a line in several pieces), and
``-prepend-rank`` prefixes chunks, not lines.  Here every output line is
assembled first and written with a single ``write(2)``, which hydra then
forwards intact.

This module must stay standard-library only: the wrapper runs it by file
path, without importing the ``hbcore`` package (see rank_wrapper.py).
"""

import os
import threading
import time
from typing import BinaryIO, Callable, List, Optional, Union

STDOUT = "stdout"
STDERR = "stderr"

# Read size for the child's pipes; lines longer than this are assembled from
# several reads.
_READ_SIZE = 65536


def line_prefix(rank: int, stream: str) -> bytes:
    """Returns the prefix put in front of every output line of a rank.

    Args:
        rank: The rank that produced the line.
        stream: ``"stdout"`` or ``"stderr"``.

    Returns:
        The prefix, e.g. ``b"[1]<stdout>:"``.
    """
    return ("[%d]<%s>:" % (rank, stream)).encode()


def timestamped_prefix(rank: int, stream: str) -> Callable[[], bytes]:
    """Returns a function giving the prefix with the local time in front,
    as horovodrun's ``--prefix-output-with-timestamp`` writes it:
    ``Thu Nov 26 14:30:00 2026[1]<stdout>:``.

    Args:
        rank: The rank that produced the line.
        stream: ``"stdout"`` or ``"stderr"``.

    Returns:
        A function called once per line.
    """
    base = line_prefix(rank, stream)

    def prefix() -> bytes:
        return time.asctime(time.localtime()).encode() + base
    return prefix


def rank_dir_name(rank: int, size: int) -> str:
    """Returns the per-rank directory name used under ``--output-filename``.

    Ranks are zero-padded to the width of the largest rank (like horovodrun)
    so that a directory listing sorts in rank order.

    Args:
        rank: The rank.
        size: The number of ranks.

    Returns:
        E.g. ``"rank.03"`` for rank 3 of 12.
    """
    width = len(str(max(size - 1, 0)))
    return "rank.%0*d" % (width, rank)


def write_all(fd: int, data: bytes) -> None:
    """Writes all of ``data`` to a file descriptor.

    Args:
        fd: The file descriptor.
        data: The bytes to write.

    Raises:
        OSError: If the write fails (e.g. BrokenPipeError).
    """
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LinePump(threading.Thread):
    """Copies a child's output pipe to a file descriptor, line by line.

    Every complete line is written to ``out_fd`` with ``prefix`` in front,
    in one write.  A trailing partial line is written (with a newline added)
    when the pipe reaches EOF.  If ``out_fd`` breaks (hbrun went away), the
    pump keeps draining the pipe so the child never blocks on a full pipe,
    and keeps writing the optional raw copy ``tee``.

    Args:
        pipe: The child's stdout or stderr (binary, read until EOF).
        out_fd: The file descriptor the prefixed lines are written to.
        prefix: Put in front of every line, e.g. from line_prefix; or a
            function called for each line (timestamped_prefix).
        tee: Optional binary file that gets the raw output (no prefix);
            closed at EOF.
    """

    def __init__(self, pipe: BinaryIO, out_fd: int,
                 prefix: Union[bytes, Callable[[], bytes]],
                 tee: Optional[BinaryIO] = None) -> None:
        super().__init__(daemon=True)
        self._pipe = pipe
        self._out_fd = out_fd
        self._prefix = prefix
        self._tee = tee
        self._out_ok = True

    def _emit(self, lines: List[bytes]) -> None:
        if self._tee is not None:
            try:
                self._tee.write(b"".join(lines))
                self._tee.flush()
            except OSError:
                self._tee = None
        if self._out_ok:
            try:
                for line in lines:
                    prefix = (self._prefix() if callable(self._prefix)
                              else self._prefix)
                    write_all(self._out_fd, prefix + line)
            except OSError:
                self._out_ok = False

    def run(self) -> None:
        """Pumps the pipe until EOF; the thread's body.

        A read error counts as EOF. A write error on ``out_fd`` or ``tee``
        stops writing there only; the pipe is still drained.
        """
        fd = self._pipe.fileno()
        pending = b""
        while True:
            try:
                chunk = os.read(fd, _READ_SIZE)
            except OSError:
                chunk = b""
            if not chunk:
                break
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut:
                # Split on "\n" only: a "\r" (progress bars) stays inside its
                # line, so the prefix marks real lines.
                self._emit([part + b"\n"
                            for part in pending[:cut - 1].split(b"\n")])
                pending = pending[cut:]
        if pending:
            self._emit([pending + b"\n"])
        if self._tee is not None:
            try:
                self._tee.close()
            except OSError:
                pass
