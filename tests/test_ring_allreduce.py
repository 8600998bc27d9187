"""HB_RING_ALLREDUCE: allreduces that MPI would carry go around a ring of
point-to-point messages that hbcore reduces (mpi_ring_allreduce.h): by
default in jobs across hosts (flat, and between hosts under the
hierarchical path), forced on (1) in any job, off (0) never. The pipeline
script's cases (fused batches in pieces, lone tensors in flight together,
every dtype kind with every reduce op, in place and out of place, a joined
rank) give numpy's results on every path, at 2 and 3 ranks (a ring of 3
splits the buffer unevenly); every rank logs the choice. Process sets
whose members span hosts get a ring of their own members (the process
sets script's concurrent case, with an 80 KB average per set)."""
import pytest

from support.harness import assert_bad_value_fails_init, run_ranks, script_path
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


def _set_ring_states(run):
    """{rank: {process set id: "on" or "off"}} from each member's log."""
    states = {}
    for rank in range(run.np):
        for line in run.rank_lines(rank):
            if "process set " in line and "ring allreduce" in line:
                set_id = int(line.split("process set ", 1)[1].split(":")[0])
                states.setdefault(rank, {})[set_id] = line.rsplit(" ", 1)[-1]
    return states


@pytest.mark.parametrize("env,want", [
    # Ranks 0 and 3 on host A, 1 and 2 on B: sets {0,1,2} and {1,2,3} span
    # the hosts, {0,3} does not.
    ({}, {1: "on", 2: "on", 3: "off"}),
    ({"HB_RING_ALLREDUCE": "0"}, {1: "off", 2: "off", 3: "off"}),
])
def test_process_sets_across_hosts(env, want):
    # Every collective on three overlapping sets at once, checked against
    # numpy (the large allreduce goes around a set's ring where it has one).
    run = launch("process_sets.py", "ABBA", 180, args=("concurrent",),
                 env=dict(env, HB_LOG_LEVEL="DEBUG"))
    run.assert_ok()
    run.assert_cases(["concurrent/ids", "concurrent/round0",
                      "concurrent/round1"])
    members = {1: [0, 1, 2], 2: [1, 2, 3], 3: [0, 3]}
    expected = {rank: {i: want[i] for i, m in members.items() if rank in m}
                for rank in range(4)}
    assert _set_ring_states(run) == expected, run.describe()
    assert_no_mpi_noise(run)


def test_process_sets_forced_ring_on_one_host():
    run = run_ranks(script_path("process_sets.py"), 3, timeout=120,
                    args=("concurrent",),
                    env={"HB_RING_ALLREDUCE": "1", "HB_LOG_LEVEL": "DEBUG"})
    run.assert_ok()
    run.assert_cases(["concurrent/ids", "concurrent/round0",
                      "concurrent/round1"])
    # Sets {0,1}, {1,2}, {0,2}: every one has a peer to form a ring with.
    members = {1: [0, 1], 2: [1, 2], 3: [0, 2]}
    expected = {rank: {i: "on" for i, m in members.items() if rank in m}
                for rank in range(3)}
    assert _set_ring_states(run) == expected, run.describe()
