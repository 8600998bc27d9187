"""Handle.wait(timeout=...) at 2 and 3 ranks: a wait that runs out of time
raises WaitTimeoutError (a TimeoutError) naming the tensor, cancels
nothing, and a later wait or synchronize returns the result (or the
error). See tests/rank_scripts/wait_timeout.py for the handshake."""
import pytest

from support.harness import cached_ranks, script_path

CASES = ["single", "group", "allgather", "mismatch", "bad-timeouts"]
def launch(np_):
    # Handle.wait within a job, its timeouts made certain by a marker-file
    # handshake (no clock races): the warm world of np_ ranks runs it
    # (harness.run_ranks' warm).
    return cached_ranks(script_path("wait_timeout.py"), np_, timeout=120,
                        warm=True)


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_is_clean(np_):
    launch(np_).assert_ok()


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_case(np_, case):
    launch(np_).assert_cases([case])
