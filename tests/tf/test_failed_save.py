"""A checkpoint save that fails on one rank only ends the job promptly,
with an error naming what went wrong on every rank
(tests/tf/rank_scripts/failed_save.py under hbrun, hard timeout, short
stall shutdown).

1. hb.train.MonitoredTrainingSession (and TF's with
   hb.BroadcastGlobalVariablesHook) after hbcore shut down: rank 0's
   save fails, rank 0 goes on to a barrier while the other ranks are in
   the session (creating it, or in a step with an allreduce); the stall
   shutdown fails both sides. hbcore's TF ops reported the shutdown as
   tf.errors.AbortedError, which TF's MonitoredSession takes for a
   preemption: it re-created the session for ever (each attempt failing
   at once in the broadcast hook), so the job never ended. Now the
   broadcast hook raises hbcore.ShutdownError naming the stalled tensor
   and ranks.
   Since hbcore's TF ops report a shutdown as UnknownError (Horovod's
   type), TF's own MonitoredTrainingSession without a broadcast hook ends
   too: the step's collective fails and the error reaches the caller.
2. The collective save of sharded tables failing on the last rank only:
   every rank raises ShardedSaveError naming that rank's error, and hbrun
   ends the job (a pin: this already worked).
"""
import pytest

from support.tf_launch import launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "failed_save.py"
STALL_ENV = {"HB_STALL_CHECK_TIME_SECONDS": "2",
             "HB_STALL_SHUTDOWN_TIME_SECONDS": "4",
             # the script's faulthandler dump of every thread, should a
             # rank outlive the launch's timeout
             "HB_TEST_DUMP_AFTER_S": "75"}
TIMEOUT_S = 90   # without the fix the job never ends
PROMPT_S = 60    # TF start-up at 3 ranks on 2 shared cores + 4 s stall


def _run(variant, np_, failing, after, fresh=False):
    return launch(SCRIPT, np_, timeout=TIMEOUT_S, env=STALL_ENV,
                  args=[variant, failing, after], cache=False, fresh=fresh)


def _error(outcome, what):
    assert isinstance(outcome, dict), "%s: no error, got %r" % (what, outcome)
    return outcome["type"], outcome["message"]


@pytest.mark.parametrize("variant,np_,rank0_error,others_error", [
    # rank 0's CheckpointSaverHook.begin cannot create its directory; the
    # others wait in the session's broadcast, which the hook reports as
    # the session that cannot be created
    ("mts_dense", 2, ("FailedPreconditionError", "is not a directory"),
     ("ShutdownError", "cannot create the session")),
    ("mts_dense", 3, ("FailedPreconditionError", "is not a directory"),
     ("ShutdownError", "cannot create the session")),
    # the same in TF's MonitoredTrainingSession with the broadcast hook
    ("tf_mts_dense", 2, ("FailedPreconditionError", "is not a directory"),
     ("ShutdownError", "cannot create the session")),
    # rank 0's save after step 1 fails; the others' step 2 allreduce fails
    # (and the session is not created again)
    ("mts_dense_steps", 2, ("ValueError", "doesn't exist, can't save"),
     ("UnknownError", "HbcoreCollective")),
])
def test_monitored_session_ends_after_shutdown(variant, np_, rank0_error,
                                               others_error):
    run = _run(variant, np_, 0, "barrier")
    assert not run.timed_out, "job never ended\n" + run.describe()
    assert run.duration < PROMPT_S, run.describe()
    # every rank caught its error and exited normally
    assert run.returncode == 0, run.describe()
    assert sorted(run.results) == list(range(np_)), run.describe()
    kind, message = _error(run.results[0]["save"], "rank 0's save")
    assert kind == rank0_error[0] and rank0_error[1] in message, (
        kind, message)
    for rank in range(np_):
        result = run.results[rank]
        if rank > 0:
            kind, message = _error(result["save"], "rank %d's session" % rank)
            assert kind == others_error[0], (rank, kind, message)
            for fragment in (others_error[1], "stalled tensor",
                             "rank(s) 0", "HB_STALL_SHUTDOWN_TIME_SECONDS"):
                assert fragment in message, (rank, fragment, message)
            if kind == "ShutdownError":
                assert "hbcore has shut down" in message, message
                assert "Graph execution error" not in message, message
        # what each rank ran after its error fails fast, naming the stall
        ops = [a["op"] for a in result["after"]]
        assert ops == ["barrier", "allreduce"], (rank, result)
        for entry in result["after"]:
            kind, message = _error(entry["outcome"],
                                   "rank %d's %s" % (rank, entry["op"]))
            assert kind == "ShutdownError", (rank, entry)
            assert "stalled tensor '" in message, (rank, entry)
            assert "rank(s) 0" in message, (rank, entry)


@pytest.mark.parametrize("np_", [2, 3])
def test_tf_session_without_broadcast_hook_ends(np_):
    """TF's own MonitoredTrainingSession, no broadcast hook: rank 0's save
    after step 1 fails, the others' step 2 allreduce fails once the stall
    shutdown stops hbcore, with UnknownError naming the op and the stall;
    nothing restarts the session (with AbortedError it did, for ever)."""
    run = _run("tf_mts_nohook_steps", np_, 0, "barrier")
    assert not run.timed_out, "job never ended\n" + run.describe()
    assert run.duration < PROMPT_S, run.describe()
    assert run.returncode == 0, run.describe()
    assert sorted(run.results) == list(range(np_)), run.describe()
    kind, message = _error(run.results[0]["save"], "rank 0's save")
    assert kind == "ValueError" and "doesn't exist, can't save" in message, (
        kind, message)
    for rank in range(1, np_):
        kind, message = _error(run.results[rank]["save"],
                               "rank %d's step" % rank)
        assert kind == "UnknownError", (rank, kind, message)
        for fragment in ("HbcoreCollective", "stalled tensor", "rank(s) 0",
                         "HB_STALL_SHUTDOWN_TIME_SECONDS"):
            assert fragment in message, (rank, fragment, message)
    assert "preemption" not in run.stderr, run.describe()


@pytest.mark.parametrize("np_", [2, 3])
def test_sharded_save_fails_on_every_rank(np_):
    failing = np_ - 1
    # A job of its own: what hbrun does when a rank fails is the subject.
    run = _run("plain_sharded", np_, failing, "raise", fresh=True)
    assert not run.timed_out, run.describe()
    assert run.duration < PROMPT_S, run.describe()
    assert run.returncode == 1, run.describe()
    assert "failed first" in run.stderr, run.describe()
    # hbrun stops the others once one exits: at least one rank reported
    assert run.results, run.describe()
    for rank, result in run.results.items():
        kind, message = _error(result["save"], "rank %d's save" % rank)
        assert kind == "ShardedSaveError", (rank, kind, message)
        assert ("rank %d: FailedPreconditionError: ckpt is not a directory"
                % failing) in message, (rank, message)
