"""Stall inspector: a tensor that only rank 0 submits ('lonely').

With HB_STALL_CHECK_TIME_SECONDS=1, rank 0 must log a warning naming the
tensor, the missing ranks and the likely cause, and saying how the job ends
(never by default: HB_STALL_SHUTDOWN_TIME_SECONDS). With HB_STALL_SHUTDOWN_TIME_SECONDS=2 as
well, the stall ends the job: rank 0's synchronize raises ShutdownError
naming the tensor and the missing ranks, the other ranks' next collective
raises ShutdownError too, and nothing hangs.
(In warn mode the other ranks stay away for 3.5 s, the stall under test;
in shutdown mode they wait for rank 0's error through a marker file. What
is asserted is the text, not the timing.)
"""
import re

import pytest

from support.harness import cached_ranks, run_ranks, script_path
from support.procs import gone

SCRIPT = script_path("stall.py")
# A 1 s stall check: a loaded machine is a false stall. Run alone
# (tests/support/quiet.py).
pytestmark = pytest.mark.quiet


def _names_ranks(text, ranks):
    return all(re.search(r"(?<![\d.])%d(?![\d.])" % r, text) for r in ranks)


@pytest.mark.parametrize("np_", [2, 3])
def test_stall_warning_names_tensor_and_missing_ranks(np_):
    run = run_ranks(SCRIPT, np_, timeout=60, args=["warn"],
                    env={"HB_STALL_CHECK_TIME_SECONDS": "1"})
    run.assert_ok()
    missing = list(range(1, np_))
    warnings = [line for rank in range(np_)
                for line in run.rank_lines(rank, "stderr")
                if "lonely" in line and "stall" in line.lower()]
    assert warnings, "no stall warning naming 'lonely'\n" + run.describe()
    # The part after the tensor name names the ranks that lack it.
    assert any(_names_ranks(line.split("lonely", 1)[1], missing)
               for line in warnings), (
        "no warning names the missing ranks %s:\n%s"
        % (missing, "\n".join(warnings)))
    # The cause to look for first, and, as the stall shutdown is off by
    # default, how to end a job that hangs.
    assert all("a collective inside a branch the ranks take differently"
               in line for line in warnings), warnings
    assert any(
        "Stall: the job waits as long as a stall lasts, warning every 1 s; "
        "HB_STALL_SHUTDOWN_TIME_SECONDS=S (hbrun "
        "--stall-check-shutdown-time-seconds S) ends it with a ShutdownError "
        "on every rank once a stall lasts S seconds" in line
        for line in run.rank_lines(0, "stderr")), run.describe()
    # Rank 0 waited until the others shut down: a ShutdownError, no result.
    r0 = run.results[0]
    assert r0["outcome"] == "raised", r0
    assert r0["error"]["type"] == "ShutdownError", r0


def test_no_stall_warning_without_a_stall():
    """Every rank submits the same 20 tensors in its own order, twice (the
    second time from the response cache): the ranks agree without a stall.

    The check time (3 s) is above the whole job's run (about 2 s): a rank
    descheduled for a second on a loaded machine is a real one-second stall
    (the warning would be right), and is not what this test is about.
    Reordering that left a tensor waiting for ever would warn and hang."""
    run = run_ranks(script_path("ordering.py"), 2, timeout=60,
                    args=["order", 20],
                    env={"HB_STALL_CHECK_TIME_SECONDS": "3"})
    run.assert_ok()
    assert "stall" not in run.stderr.lower(), run.describe()


def shutdown_run(np_):
    return cached_ranks(SCRIPT, np_, timeout=60, args=["shutdown"],
                        env={"HB_STALL_CHECK_TIME_SECONDS": "1",
                             "HB_STALL_SHUTDOWN_TIME_SECONDS": "2"})


@pytest.mark.parametrize("np_", [2, 3])
def test_stall_shutdown_fails_every_rank(np_):
    run = shutdown_run(np_)
    assert not run.timed_out, "the stall shutdown hung\n" + run.describe()
    assert sorted(run.results) == list(range(np_)), run.describe()
    missing = list(range(1, np_))
    for rank in range(np_):
        result = run.results[rank]
        assert result["outcome"] == "raised", (rank, result)
        error = result["error"]
        assert error["type"] == "ShutdownError", (rank, error)
        # Every rank learns where the failure was: the stalled tensor.
        assert "lonely" in error["message"], (rank, error)
        if rank == 0:
            tail = error["message"].split("lonely", 1)[1]
            assert _names_ranks(tail, missing), (
                "rank 0's error does not name the missing ranks %s: %r"
                % (missing, error["message"]))
            # Ended by the stall, not by the others' later shutdown.
            assert "stall" in error["message"].lower(), error
            # The warnings before it said when the job would end.
            assert any("Stall: the job ends with a ShutdownError on every "
                       "rank once a stall lasts 2 s "
                       "(HB_STALL_SHUTDOWN_TIME_SECONDS)" in line
                       for line in run.rank_lines(0, "stderr")), (
                run.describe())
    assert run.returncode == 0, run.describe()


@pytest.mark.parametrize("np_", [2, 3])
def test_init_again_after_stall_shutdown(np_):
    run = shutdown_run(np_)
    assert sorted(run.results) == list(range(np_)), run.describe()
    for rank in range(np_):
        assert run.results[rank].get("reinit") == "ok", (rank,
                                                          run.results[rank])


@pytest.mark.parametrize("np_", [2, 3])
def test_a_stopped_rank_ends_a_fixed_job_at_the_stall_shutdown_time(np_):
    # The last rank SIGSTOPs itself: the others block on it in the
    # control plane, where no stall check runs, so before hang_watch.py
    # the job waited forever whatever the stall shutdown time. Now the
    # stopped rank's wrapper kills it after that time, and hbrun ends the
    # job naming it and why. (No stall warning: rank 0's check never ran.)
    run = run_ranks(SCRIPT, np_, timeout=60, args=["stop"],
                    env={"HB_STALL_CHECK_TIME_SECONDS": "1",
                         "HB_STALL_SHUTDOWN_TIME_SECONDS": "2"})
    assert not run.timed_out, "the stopped rank hung the job\n" + (
        run.describe())
    match = re.search(
        r"hbrun: rank %d failed first: killed by signal SIGKILL \(9\) by "
        r"hbrun: it made no progress: stopped \(state T\) for "
        r"(2|3)\.\d s \(limit: --stall-check-shutdown-time-seconds 2\) "
        r"\[host [^,]+, pid (\d+)\]; stopped the remaining ranks\n"
        % (np_ - 1), run.stderr)
    assert match, run.describe()
    assert run.returncode == 128 + 9, run.describe()
    assert run.results == {}, run.describe()  # no allreduce completed
    assert gone(int(match.group(2))), "the stopped rank is still there"
