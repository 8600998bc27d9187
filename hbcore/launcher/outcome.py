"""How a job ended, said one way for every entry point: the ranks' results
and the root failure, the report lines, and the launcher's own stop
signals.

- Results: a function job's ranks (run_task.py for ``hbcore.run``,
  hosted_rank.py for Spark/Ray) each leave an outcome, ``("ok", value)``
  or ``("error", info)`` (run_task.error_outcome); ``collect`` turns them
  into the values in rank order or the one error that names the job's
  cause (``root_failure``).
- Reports: ``first_failure_line`` is the line naming the rank that failed
  first (hbrun's, a TF_CONFIG machine's, a Spark/Ray driver's), with
  where the rank ran as the caller words it; ``placed_job_report`` the
  end of a job placed across machines or tasks.
- Signals: SIGINT, SIGTERM and SIGHUP to the launcher stop the job.
  ``on_stop_signals`` installs a handler for them while a step runs (in
  the main thread only: elsewhere the caller's handling applies);
  ``Stopped`` is what a handler raises to leave a wait, and
  ``stopped_line`` the report.
"""

import contextlib
import signal
import threading
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List,
                    Mapping, Optional, Sequence, Tuple)

from hbcore.launcher.rank.rank_status import RankStatus

if TYPE_CHECKING:  # the supervisor imports this module
    from hbcore.launcher.supervisor import LaunchResult

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived at the launcher (Ctrl-C, an orchestrator's
    stop); raised by ``raise_stopped`` out of a wait."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum: int) -> None:
    """A handler for ``on_stop_signals`` that raises Stopped."""
    raise Stopped(signum)


@contextlib.contextmanager
def on_stop_signals(handler: Callable[[int], None]) -> Iterator[None]:
    """Calls ``handler(signum)`` for each stop signal while the block runs
    (from the main thread only), and restores the previous handlers.

    Args:
        handler: Called with the signal number, in the main thread.
    """
    previous: Dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(
                signum, lambda number, _frame: handler(number))
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def stopped_line(program: str, signum: int, what: str) -> str:
    """``hbrun: received SIGINT; stopped all ranks``: the report of a
    launcher stopped by a signal; ``what`` says what it stopped."""
    return "%s: received %s; stopped %s" % (
        program, signal.Signals(signum).name, what)


def reraise_signal(program: str, signum: int) -> None:
    """Once the ranks are stopped, lets the signal do to this process what
    it would have done without the launcher (the default SIGTERM kills
    it; SIGINT raises KeyboardInterrupt).

    Raises:
        KeyboardInterrupt: For SIGINT.
        RuntimeError: For a signal whose handler let this process live.
    """
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.raise_signal(signum)
    raise RuntimeError("%s: interrupted by %s"
                       % (program, signal.Signals(signum).name))


def first_failure_line(program: str, failure: RankStatus, where: str,
                       tail: str) -> str:
    """``hbrun: rank 1 (WHERE) failed first: exited with code 3 [host h,
    pid 42]TAIL``; no parentheses when ``where`` is empty."""
    return "%s: rank %d%s failed first: %s [host %s, pid %d]%s" % (
        program, failure.rank, " (%s)" % where if where else "",
        failure.describe(), failure.host, failure.pid, tail)


def placed_job_report(result: "LaunchResult", program: str,
                      places: Sequence[str], tail: str) -> str:
    """The line the launchers of a placed job (a TF_CONFIG job's machines,
    a Spark or Ray driver) report at its end.

    Args:
        result: The coordinator's launch.
        program: Name starting the line (``hbcore.spark.run``).
        places: Where each rank ran, by rank, in the caller's words
            (``chief:0 (host a), its worker 1``).
        tail: What the job did about a failure (``"; stopped the job"``).

    Returns:
        The first failing rank's line with its place; the supervisor's own
        line when the launch was stopped, or its first failure is a rank
        ``places`` does not name; "" on success.
    """
    failure = result.first_failure
    if failure is None or not 0 <= failure.rank < len(places):
        return result.message(program) or ""
    return first_failure_line(program, failure, places[failure.rank], tail)


def rank_error(program: str, rank: int, info: dict) -> RuntimeError:
    """The caller's exception for a rank whose function raised.

    Args:
        program: Name starting the message (``hbcore.run``).
        rank: The rank.
        info: Its error outcome's info (see run_task.error_outcome).

    Returns:
        A RuntimeError naming the rank, the exception and its traceback.
    """
    return RuntimeError(
        "%s: rank %d raised %s: %s\n\nTraceback of rank %d:\n%s"
        % (program, rank, info["type"], info["message"], rank,
           info["traceback"].rstrip()))


def root_failure(errors: Dict[int, dict],
                 first_rank: Optional[int]) -> int:
    """The rank whose error is the job's cause.

    When one rank raises, its exit shuts hbcore down and tells the peers,
    whose pending collectives then fail with a ShutdownError naming it.
    Such a peer may exit (and so reach the launcher as the first failure)
    before the rank that caused it, so a ShutdownError is the cause only
    when every error is one (a rank that shut down itself, a stall).
    Among the candidates: the launcher's first failure, else the earliest
    error (error_outcome's time), else the lowest rank.

    Args:
        errors: rank -> error info of every rank that raised.
        first_rank: the rank the launcher saw fail first, if any.

    Returns:
        A rank of ``errors``.
    """
    causes = [rank for rank, info in errors.items()
              if info["type"] != "ShutdownError"] or list(errors)
    if first_rank in causes:
        return first_rank
    return min(causes, key=lambda r: (errors[r].get("time", 0), r))


def collect(program: str, size: int,
            outcomes: Mapping[int, Optional[Tuple[str, Any]]],
            first_rank: Optional[int], report: str, exit_code: int
            ) -> List[Any]:
    """The values of a function job's ranks, or the error naming its cause.

    Args:
        program: Name starting the messages.
        size: The number of ranks.
        outcomes: Rank -> its outcome; a rank missing or None left none.
        first_rank: The rank the launcher saw fail first, or None.
        report: The launcher's report line ("" when the job succeeded).
        exit_code: The launcher's exit code.

    Returns:
        The values, in rank order.

    Raises:
        RuntimeError: The root failure's error (its rank and traceback)
            when a rank raised; the launcher's report when the first rank
            to fail died without raising (the others' errors are its
            consequences) or the job failed otherwise; else the ranks
            that left no outcome.
    """
    got = {r: o for r, o in outcomes.items() if o is not None}
    errors = {r: o[1] for r, o in got.items() if o[0] == "error"}
    if first_rank is not None and first_rank not in errors and report:
        raise RuntimeError(report)
    if errors:
        rank = root_failure(errors, first_rank)
        raise rank_error(program, rank, errors[rank])
    lost = [o[1]["message"] for o in got.values() if o[0] != "ok"]
    missing = [r for r in range(size) if r not in got]
    if lost or missing or exit_code != 0:
        reasons = [report] if report else []
        reasons += sorted(set(m for m in lost if m and m not in reasons))
        if missing:
            reasons.append("%s: ranks %s exited without a result"
                           % (program, missing))
        raise RuntimeError("\n".join(reasons) or "%s: the job failed "
                           "(exit code %d)" % (program, exit_code))
    return [got[r][1] for r in range(size)]
