"""Polling with a deadline, for pytest-side test code.

    wait_until(lambda: path.exists(), 30, what="the config file")

waits until the predicate holds and fails the test (AssertionError naming
what it waited for) when it does not within the timeout;
``poll_until`` is the same loop for callers that go on either way and
decide themselves what a timeout means.

Rank scripts and other code that runs in processes of their own keep their
own loops: they do not import the test support.
"""
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll_until(predicate: Callable[[], T], timeout: float,
               interval: float = 0.05) -> T:
    """Calls ``predicate`` until it returns a true value or ``timeout``
    seconds have passed.

    The predicate is called at least once, and once more after the
    deadline passed, so a condition that became true during the last sleep
    is not missed. An exception (an assertion on a process that must still
    be running, say) propagates at once.

    Args:
        predicate: the condition; its result's truth decides.
        timeout: seconds to keep polling.
        interval: seconds to sleep between calls.

    Returns:
        The predicate's last result: true when the condition held in time,
        false (whatever false value it returned) when the time ran out.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval)


def wait_until(predicate: Callable[[], T], timeout: float,
               interval: float = 0.05, what: str = "the condition") -> T:
    """Waits until ``predicate()`` returns a true value (see poll_until).

    Args:
        predicate: the condition; its result's truth decides.
        timeout: seconds to wait at most.
        interval: seconds to sleep between calls.
        what: what is waited for, the message of the failure.

    Returns:
        The predicate's first true result.

    Raises:
        AssertionError: ``what`` when the predicate was still false after
            ``timeout`` seconds.
    """
    result = poll_until(predicate, timeout, interval)
    if not result:
        raise AssertionError(what)
    return result
