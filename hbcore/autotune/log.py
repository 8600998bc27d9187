"""The autotune CSV log (``HB_AUTOTUNE_LOG``, ``hbrun --autotune-log-file``).

Horovod's columns first, with Horovod's meanings, so tools written for its
log read this one: ``hierarchical_allreduce, hierarchical_allgather,
torus_allreduce, cache_enabled`` (0 / 1; hbcore has no torus allreduce, so
that column is always 0), ``cycle_time_ms``, ``tensor_fusion_threshold``
(MiB), ``score``. hbcore's score is bytes per second (Horovod writes bytes
per microsecond: the same order, a constant factor apart). Then hbcore's
own: ``sample`` (1, 2, ...), ``phase`` (``warmup``: discarded; ``sample``:
scored; ``best``: the final choice, written once tuning converged, with the
score of the sample that measured it), ``ring_allreduce``,
``pipeline_piece_bytes`` (0: the backend's own), ``fusion_threshold_bytes``
(exact), ``seconds`` (the sample's wall time) and ``tuned`` (the
parameters that were free to change, ``+``-separated).

Every row is flushed as it is written, so a job that ends before tuning
converged leaves every sample it took.
"""
import csv
from typing import IO, Dict, List, Mapping, Optional, Sequence

HOROVOD_COLUMNS = ("hierarchical_allreduce", "hierarchical_allgather",
                   "torus_allreduce", "cache_enabled", "cycle_time_ms",
                   "tensor_fusion_threshold", "score")
HBCORE_COLUMNS = ("sample", "phase", "ring_allreduce", "pipeline_piece_bytes",
                  "fusion_threshold_bytes", "seconds", "tuned")
COLUMNS = HOROVOD_COLUMNS + HBCORE_COLUMNS
_MIB = 1024.0 * 1024.0


class LogWriter:
    """Writes the log's rows.

    Args:
        path: the file (truncated), or None to write nothing.
        tuned: the names of the tuned parameters.
    """

    def __init__(self, path: Optional[str], tuned: Sequence[str]) -> None:
        self._file: Optional[IO[str]] = None
        self._tuned = "+".join(tuned)
        if path:
            self._file = open(path, "w", newline="")
            self._csv = csv.writer(self._file)
            self._csv.writerow(COLUMNS)
            self._file.flush()

    def write(self, sample: int, phase: str, params: Mapping[str, object],
              score: float, seconds: float) -> None:
        """Appends one row."""
        if self._file is None:
            return
        flag = lambda name: int(bool(params[name]))  # noqa: E731
        self._csv.writerow([
            flag("hierarchical_allreduce"), flag("hierarchical_allgather"), 0,
            flag("cache_enabled"), "%g" % float(params["cycle_time"]),
            "%g" % (int(params["fusion_threshold"]) / _MIB), "%.6g" % score,
            sample, phase, flag("ring_allreduce"),
            int(params["pipeline_piece_bytes"]),
            int(params["fusion_threshold"]), "%.6g" % seconds, self._tuned])
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_log(path: str) -> List[Dict[str, str]]:
    """The rows of a log, as dicts keyed by column.

    Raises:
        ValueError: the file is not an autotune log (its header differs).
    """
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(header) != COLUMNS:
            raise ValueError("%s is not an hbcore autotune log (expected the "
                             "header %s)" % (path, ",".join(COLUMNS)))
        return [dict(zip(COLUMNS, row)) for row in reader if row]
