"""Handle.wait(timeout=...) at 2 and 3 ranks: a wait that runs out of time
raises WaitTimeoutError (a TimeoutError) naming the tensor, cancels
nothing, and a later wait or synchronize returns the result (or the
error). See tests/rank_scripts/wait_timeout.py for the handshake."""
import pytest

from harness import run_ranks, script_path

CASES = ["single", "group", "allgather", "mismatch", "bad-timeouts"]
_runs = {}


def launch(np_):
    if np_ not in _runs:
        _runs[np_] = run_ranks(script_path("wait_timeout.py"), np_,
                               timeout=120)
    return _runs[np_]


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_is_clean(np_):
    launch(np_).assert_ok()


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_case(np_, case):
    launch(np_).assert_cases([case])
