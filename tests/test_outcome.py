"""hbcore/launcher/outcome.py: the one way results are collected, the root
failure named and stop signals handled, for every entry point (the
launches that use it are tested in test_run_fn, test_spark, test_ray,
test_tf_config_launch and test_elastic)."""
import os
import signal
import threading

import pytest

from support.hbcore_path import import_hbcore_package

import_hbcore_package()
from hbcore.launcher.outcome import (Stopped, collect,  # noqa: E402
                                     on_stop_signals, placed_job_report,
                                     raise_stopped)
from hbcore.launcher.rank.rank_status import RankStatus  # noqa: E402
from hbcore.launcher.supervisor import LaunchResult  # noqa: E402


def _error(kind, message, time):
    return ("error", {"type": kind, "message": message, "time": time,
                      "traceback": "Traceback: %s\n" % message})


def test_stop_signals_reach_the_handler_in_the_main_thread_only():
    before = signal.getsignal(signal.SIGHUP)
    got = []
    with on_stop_signals(got.append):
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
    assert got == [signal.SIGHUP, signal.SIGTERM]
    assert signal.getsignal(signal.SIGHUP) is before
    with pytest.raises(Stopped) as exc:
        with on_stop_signals(raise_stopped):
            os.kill(os.getpid(), signal.SIGINT)
    assert exc.value.signum == signal.SIGINT
    # From another thread nothing is installed (Python allows handlers in
    # the main thread only): the caller's handling stays.
    seen = []

    def elsewhere():
        with on_stop_signals(got.append):
            seen.append(signal.getsignal(signal.SIGHUP))
    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    assert seen == [before]


def test_collect_names_the_cause_of_a_failed_function_job():
    ok = {0: ("ok", "a"), 1: ("ok", "b")}
    assert collect("p", 2, ok, None, "", 0) == ["a", "b"]
    # A peer's ShutdownError that reached the launcher first is a
    # consequence: the cause is the other rank's own error.
    errors = {0: _error("ShutdownError", "rank 1 shut down", 1.0),
              1: _error("ValueError", "root", 2.0)}
    with pytest.raises(RuntimeError, match=r"^p: rank 1 raised ValueError: "
                       r"root\n\nTraceback of rank 1:\nTraceback: root$"):
        collect("p", 2, errors, 0, "p: rank 0 failed first", 1)
    # The first rank to fail died without raising: the report names it.
    with pytest.raises(RuntimeError, match=r"^p: rank 1 failed first$"):
        collect("p", 2, {0: _error("ValueError", "gone", 1.0), 1: None}, 1,
                "p: rank 1 failed first", 1)
    with pytest.raises(RuntimeError,
                       match=r"^p: ranks \[1\] exited without a result$"):
        collect("p", 2, {0: ("ok", "a")}, None, "", 0)


def test_a_placed_job_report_names_where_the_first_failure_ran():
    """One report for TF_CONFIG machines and Spark/Ray drivers: the first
    failing rank with its place; the supervisor's own line for what the
    places do not cover (a stop, a rank they do not name); "" on success."""
    places = ["chief:0 (host a), its worker 0",
              "worker:1 (host b), its worker 0"]
    died = RankStatus(rank=1, exit_code=None, signal=signal.SIGKILL,
                      host="b", pid=42, time=1.0)
    failed = LaunchResult(exit_code=137, np=2, first_failure=died,
                          interrupted_by=None, mpiexec_code=1)
    assert placed_job_report(failed, "hbcore.run", places, "; stopped it") == (
        "hbcore.run: rank 1 (worker:1 (host b), its worker 0) failed first: "
        "killed by signal SIGKILL (9) [host b, pid 42]; stopped it")
    unplaced = failed._replace(first_failure=died._replace(rank=2))
    assert placed_job_report(unplaced, "hbcore.run", places, "; x") == (
        "hbcore.run: rank 2 failed first: killed by signal SIGKILL (9) "
        "[host b, pid 42]; stopped the remaining ranks")
    aborted = LaunchResult(exit_code=1, np=2, first_failure=None,
                           interrupted_by=None, mpiexec_code=-15,
                           aborted="machine worker:1 went away")
    assert placed_job_report(aborted, "hbcore.run", places, "; x") == (
        "hbcore.run: machine worker:1 went away; stopped all ranks")
    ok = LaunchResult(exit_code=0, np=2, first_failure=None,
                      interrupted_by=None, mpiexec_code=0)
    assert placed_job_report(ok, "hbcore.run", places, "; x") == ""
