"""Quiet tests: a pytest plugin that runs the tests marked ``quiet`` alone
while the suite runs in several processes (pytest-xdist's ``-n``).

The suite runs one test at a time by default. On a machine with more
cores, ``python -m pytest -n 4 --dist loadfile tests`` runs four test files
at a time (loadfile: a file's launch cache, warm worlds and module
fixtures stay in one process). A test whose subject is time or CPU (idle
CPU, a stall check of one second, the short-job limit, the settle wait)
measures its own job, so it runs with no other test running: mark it (or
its module) ``pytest.mark.quiet``.

Protocol: every worker process takes a lock file shared by the test run
(named after xdist's run id) around each test: SHARED for an ordinary
test, EXCLUSIVE for a quiet one. A quiet test therefore starts only after
the tests running in the other workers end, and none starts until it
ends. So that a quiet test waiting for its exclusive lock is not starved
by other workers taking shared locks one test after another, every
acquisition first passes a turnstile (a second lock file, taken
exclusively): a quiet test holds the turnstile while it waits, so no new
shared lock is granted before its turn. Without xdist (one process) the
plugin does nothing.
"""
import contextlib
import fcntl
import os
import tempfile
from typing import Iterator

import pytest

MARKER = "quiet"


def _lock_path(suffix: str) -> str:
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")
    return os.path.join(tempfile.gettempdir(),
                        "hbcore-tests-%s.%s" % (run_id, suffix))


@contextlib.contextmanager
def _locked(quiet: bool) -> Iterator[None]:
    """Holds the run's lock, exclusively for a quiet test (see the module
    docstring's protocol)."""
    with open(_lock_path("turnstile"), "a") as turnstile, \
            open(_lock_path("lock"), "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if quiet else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "%s: the test measures time or CPU; under xdist it runs "
        "with no other test running (tests/support/quiet.py)" % MARKER)


# tryfirst: the outermost wrapper, so the wait for the lock is outside
# pytest-timeout's timer (a test is timed from when it may run).
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    with _locked(item.get_closest_marker(MARKER) is not None):
        yield
