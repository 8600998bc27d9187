"""The rank wrapper's watch for a rank that hangs without dying
(hbcore/launcher/rank/hang_watch.py), on real child processes; the jobs that
rely on it are in test_elastic.py and test_stall.py."""
import signal
import subprocess
import sys
import time

import pytest

from hbcore.launcher.rank.hang_watch import (HangLimit, hang_limit,
                                             process_state, wait_watching)

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the watch reads /proc (Linux)")]


def test_the_limit_is_the_stall_shutdown_time_else_the_elastic_timeout():
    stall, elastic = ("HB_STALL_SHUTDOWN_TIME_SECONDS",
                      "HB_ELASTIC_TIMEOUT_SECONDS")
    assert hang_limit({}) is None  # a fixed job without one: no limit
    assert hang_limit({stall: "0"}) is None
    assert hang_limit({elastic: "600"}) == HangLimit(
        600.0, "--elastic-timeout 600")
    assert hang_limit({stall: "2.5", elastic: "600"}) == HangLimit(
        2.5, "--stall-check-shutdown-time-seconds 2.5")
    assert hang_limit({stall: "0", elastic: "600"}).seconds == 600
    # Garbage is the core's to refuse at init (naming the variable).
    assert hang_limit({stall: "soon", elastic: "7"}).seconds == 7


def test_a_stopped_child_is_killed_after_the_limit():
    child = subprocess.Popen(["sleep", "30"])
    try:
        child.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        code, why = wait_watching(child, HangLimit(0.4, "test 0.4"))
        took = time.monotonic() - start
    finally:
        child.kill()
        child.wait()
    assert code == -signal.SIGKILL, code
    assert why.startswith("it made no progress: stopped (state T) for 0."), why
    assert why.endswith(" s (limit: test 0.4)"), why
    assert 0.4 <= took < 5, took  # not before the limit; loose above: load


def test_a_child_that_runs_or_sleeps_past_the_limit_is_not_killed():
    child = subprocess.Popen(["sleep", "0.8"])
    assert process_state(child.pid) in ("R", "S")
    code, why = wait_watching(child, HangLimit(0.2, "test 0.2"))
    assert (code, why) == (0, None)
    assert process_state(child.pid) is None  # reaped: gone from /proc
