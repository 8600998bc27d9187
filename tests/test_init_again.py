"""init() while this rank's runtime exists, running or stopped by a peer's
shutdown, returns at once: it must not start a collective that not every
rank joins (rank_scripts/init_again.py)."""
import pytest

from support.harness import run_ranks, script_path

SCRIPT = script_path("init_again.py")
PROMPT_S = 5.0


@pytest.mark.parametrize("np_", [2, 3])
def test_init_again_returns_at_once(np_):
    run = run_ranks(SCRIPT, np_, timeout=60)
    assert not run.timed_out, run.describe()
    run.assert_ok()
    leaver = np_ - 1
    expected_sum = [sum(range(1, np_ + 1))] * 2
    for rank in range(np_):
        result = run.results[rank]
        assert result["sum"] == expected_sum, (rank, result)
    assert run.results[0]["second_init_s"] < PROMPT_S, run.results[0]
    for rank in range(np_ - 1):
        result = run.results[rank]
        assert result["init_after_peer_shutdown_s"] < PROMPT_S, (rank, result)
        # As in Horovod: the stopped runtime stays until this rank's own
        # shutdown(), and its operations keep failing with the peer's name.
        assert result["initialized"] is True, (rank, result)
        error = result["allreduce"]
        assert isinstance(error, dict), (rank, result)
        assert error["type"] == "ShutdownError", (rank, error)
        assert "rank %d" % leaver in error["message"], (rank, error)
        assert result["initialized_after_shutdown"] is False, (rank, result)
