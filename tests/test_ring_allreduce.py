"""HB_RING_ALLREDUCE: allreduces that MPI would carry go around a ring of
point-to-point messages that hbcore reduces (mpi_ring_allreduce.h): by
default in jobs across hosts (flat, and between hosts under the
hierarchical path), forced on (1) in any job, off (0) never. The pipeline
script's cases (fused batches in pieces, lone tensors in flight together,
every dtype kind with every reduce op, in place and out of place, a joined
rank) give numpy's results on every path, at 2 and 3 ranks (a ring of 3
splits the buffer unevenly); every rank logs the choice."""
import pytest

from harness import assert_bad_value_fails_init, run_ranks, script_path
from test_multihost import PIPELINE_CASES, assert_no_mpi_noise, launch


def _ring_state(run):
    states = {}
    for rank in range(run.np):
        lines = [l for l in run.rank_lines(rank) if "ring allreduce" in l]
        assert len(lines) == 1, (rank, lines, run.describe())
        states[rank] = lines[0].rsplit(" ", 1)[-1]
    return states


@pytest.mark.parametrize("layout,env,want", [
    ("2x1", {}, "on"),
    ("2+1", {}, "on"),
    ("2x2", {}, "on"),
    ("2x1", {"HB_RING_ALLREDUCE": "0"}, "off"),
    ("2x1", {"HOROVOD_RING_ALLREDUCE": "false"}, "off"),
])
def test_choice_across_hosts(layout, env, want):
    run = launch("short_job.py", layout, 60,
                 env=dict(env, HB_LOG_LEVEL="DEBUG"))
    run.assert_ok()
    assert set(_ring_state(run).values()) == {want}, run.describe()


@pytest.mark.parametrize("np_,env,want", [
    (2, {}, "off"),
    (3, {"HB_RING_ALLREDUCE": "1"}, "on"),
    (1, {"HB_RING_ALLREDUCE": "1"}, "off"),  # no peer to form a ring with
])
def test_choice_on_one_host(np_, env, want):
    run = run_ranks(script_path("short_job.py"), np_, timeout=60,
                    env=dict(env, HB_LOG_LEVEL="DEBUG"))
    run.assert_ok()
    assert set(_ring_state(run).values()) == {want}, run.describe()


@pytest.mark.parametrize("np_", [2, 3])
def test_forced_ring_on_one_host(np_):
    # Without the node shared-memory path every allreduce takes MPI's
    # place, so the ring carries all of them.
    run = run_ranks(script_path("pipeline.py"), np_, timeout=120,
                    env={"HB_RING_ALLREDUCE": "1",
                         "HB_SHM_ALLREDUCE_THRESHOLD": "0"})
    run.assert_ok()
    run.assert_cases(PIPELINE_CASES)


@pytest.mark.parametrize("layout", ["2x1", "2+1"])
def test_mpi_allreduce_across_hosts_when_off(layout):
    run = launch("pipeline.py", layout, 120, env={"HB_RING_ALLREDUCE": "0"})
    run.assert_ok()
    run.assert_cases(PIPELINE_CASES)
    assert_no_mpi_noise(run)


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_value_fails_init(np_):
    assert_bad_value_fails_init("HB_RING_ALLREDUCE", "sometimes", np_)
