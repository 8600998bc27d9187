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
                                     on_stop_signals, raise_stopped)


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
