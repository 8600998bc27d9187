"""Jobs spanning hosts, emulated on this machine (harness.emulated_hosts):
MPICH's fork launcher starts every rank here while MPI sees two nodes, so
the local and cross communicators split as on a cluster, the single-host
shared-memory allreduce is off and traffic between the "hosts" takes MPI's
network path.

Layouts: 2 hosts x 2 ranks (allreduces go hierarchical by default), 2
hosts x 1 rank, and 2 + 1 ranks (uneven: flat MPI allreduces, hierarchical
allgathers); the allgather tests add placements whose hosts are not
consecutive in rank order (hA, hB, hA and hA, hB, hB, hA). What runs there is a
representative subset of the single-host suite (collectives with the
topology checked, ordering, errors, the stall shutdown, a killed rank on
the second host, TF training), plus 50 consecutive short jobs that must
each finish within seconds: a lost wake-up between hosts used to hold
such jobs until the stall inspector's timer (60 s by default).
Every launch must also leave nothing on stderr from MPI (wake-ups still
in flight at finalize made UCX warn).

UCX sees that the emulated hosts share a machine and carries their traffic
through its shared-memory transports (System V and CMA). The *_over_tcp
tests make it use TCP instead (UCX_TLS=tcp,self), as between real hosts
without RDMA: there messages move only while some rank drives MPI's
progress, which is what lost wake-ups and unprogressed requests get wrong.
"""
import os
import re

import pytest

from support.harness import cached_run, emulated_hosts, run_ranks, script_path
from rank_scripts import allgather_hosts, collectives

LAYOUTS = {"2x2": [2, 2], "2x1": [1, 1], "2+1": [2, 1]}
DTYPES = ["int8", "bfloat16", "float32", "bool"]
# A job of 4 ranks doing one allreduce takes about 1 s here; a lost
# wake-up costs the stall check time (set to 30 s below, so a stall is
# unmistakable).
SHORT_JOB_S = 5.0
SHORT_JOBS = 50
# MPICH's UCX netmod: talk through TCP, not shared memory.
OVER_TCP = {"UCX_TLS": "tcp,self"}
TCP_SHORT_JOBS = 10


def network_interface_up():
    """Whether an interface other than loopback is up: UCX's TCP transport
    will not use loopback (MPI_Init fails with "no route")."""
    root = "/sys/class/net"
    for name in (os.listdir(root) if os.path.isdir(root) else []):
        try:
            with open(os.path.join(root, name, "operstate")) as f:
                up = f.read().strip() == "up"
        except OSError:
            continue
        if name != "lo" and up:
            return True
    return False


needs_tcp = pytest.mark.skipif(
    not network_interface_up(),
    reason="UCX's TCP transport needs a network interface other than lo")
MPI_NOISE = re.compile(r"UCX\s+WARN|was not matched|MPICH ERROR|Fatal error",
                       re.IGNORECASE)


# Layouts for the allgather tests only: "ABA" puts ranks 0 and 2 on hA and
# rank 1 on hB, "ABBA" ranks 0 and 3 on hA, so a host's ranks are not
# consecutive in rank order. (slots per host, host of each rank)
INTERLEAVED = {"ABA": ([2, 1], [0, 1, 0]), "ABBA": ([2, 2], [0, 1, 1, 0])}


def launch(script, layout, timeout, args=(), env=None):
    slots, rankmap = INTERLEAVED.get(layout, (LAYOUTS.get(layout), None))
    hbrun_args, host_env = emulated_hosts(slots, rankmap)
    host_env.update(env or {})
    return run_ranks(script_path(script), sum(slots),
                     timeout=timeout, args=args, env=host_env,
                     hbrun_args=hbrun_args)


def state_lines(run, what):
    """Each rank's debug line saying whether `what` ("hierarchical
    allgather") is on."""
    return {rank: [l for l in run.rank_lines(rank) if what in l]
            for rank in range(run.np)}


def assert_no_mpi_noise(run):
    noise = [line for line in (run.stdout + run.stderr).splitlines()
             if MPI_NOISE.search(line)]
    assert not noise, "MPI printed:\n%s\n%s" % ("\n".join(noise[:10]),
                                                run.describe(2000))


def collectives_run(layout, env=None):
    """The launch of a layout (and env), run once per test session."""
    return cached_run(("test_multihost collectives", layout,
                       tuple(sorted((env or {}).items()))),
                      lambda: launch("collectives.py", layout, 180,
                                     args=[",".join(DTYPES)], env=env))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_collectives_across_hosts(layout):
    """Every collective x dtype subset, checked against numpy on every rank;
    misc/topology checks local/cross rank and size against the layout."""
    run = collectives_run(layout)
    run.assert_ok()
    size = sum(LAYOUTS[layout])
    names = [name for name, _ in collectives.build_cases(size, 0, DTYPES)]
    assert "misc/topology" in names
    run.assert_cases(names)
    assert_no_mpi_noise(run)


@needs_tcp
def test_collectives_over_tcp():
    """The collectives at 2 x 2 with the hosts talking through TCP. UCX
    prints the protocols it chose (UCX_PROTO_INFO): TCP ones only."""
    run = collectives_run("2x2", dict(OVER_TCP, UCX_PROTO_INFO="y"))
    run.assert_ok()
    run.assert_cases([name for name, _ in collectives.build_cases(4, 0, DTYPES)])
    assert_no_mpi_noise(run)
    output = run.stdout + run.stderr
    assert "tcp/" in output, run.describe(2000)
    assert not re.search(r"\| (sysv|posix|cma|xpmem|knem)/", output), \
        run.describe(2000)


@pytest.mark.parametrize("choice", ["0", "1"])
def test_allreduce_groups_flat_and_hierarchical(choice):
    """At 2 x 2 the allreduce groups give the numpy results whether forced
    flat (one MPI allreduce over all ranks) or hierarchical."""
    run = collectives_run("2x2", {"HB_HIERARCHICAL_ALLREDUCE": choice})
    run.assert_ok()
    names = [name for name, _ in collectives.build_cases(4, 0, DTYPES)
             if name.startswith(("allreduce", "grouped", "inplace"))]
    assert names
    run.assert_cases(names)
    assert_no_mpi_noise(run)


@pytest.mark.parametrize("layout,choice,expect_on,warning", [
    ("2x2", None, True, None),
    ("2x2", "0", False, None),
    ("2x2", "auto", True, None),
    ("2x1", "1", False, "every host runs one rank"),
    ("2+1", "1", False, "hosts run different numbers of ranks"),
])
def test_hierarchical_choice(layout, choice, expect_on, warning):
    """Automatic by default where hosts have equal rank counts (> 1);
    HB_HIERARCHICAL_ALLREDUCE=1 where it cannot apply says why."""
    env = {"HB_LOG_LEVEL": "DEBUG", "HB_STALL_CHECK_TIME_SECONDS": "30"}
    if choice is not None:
        env["HB_HIERARCHICAL_ALLREDUCE"] = choice
    run = launch("short_job.py", layout, 60, env=env)
    run.assert_ok()
    state = "on" if expect_on else "off"
    for rank in range(run.np):
        lines = [l for l in run.rank_lines(rank) if "hierarchical allreduce" in l]
        assert lines and lines[0].endswith(state), (rank, lines)
    if warning:
        assert warning in run.stderr, run.describe()
    else:
        assert "HB_HIERARCHICAL_ALLREDUCE=1 ignored" not in run.stderr


@pytest.mark.parametrize("layout", ["2x2", "2+1", "ABA", "ABBA"])
@pytest.mark.parametrize("choice", ["0", "1"])
def test_allgather_flat_and_hierarchical(layout, choice):
    """Allgathers of several dtypes, uneven first dims, ranks with no rows,
    a grouped allgather and several in flight give numpy's bytes exactly,
    forced flat (one MPI_Allgatherv) or hierarchical (within hosts, then
    between leaders), on even, uneven and interleaved placements."""
    run = launch("allgather_hosts.py", layout, 180, args=["numpy"],
                 env={"HB_HIERARCHICAL_ALLGATHER": choice,
                      "HB_LOG_LEVEL": "DEBUG"})
    run.assert_ok()
    run.assert_cases(allgather_hosts.NUMPY_CASES)
    want = "on" if choice == "1" else "off"
    for rank, lines in state_lines(run, "hierarchical allgather").items():
        assert lines and lines[0].endswith(want), (rank, lines)
    assert "HB_HIERARCHICAL_ALLGATHER=1 ignored" not in run.stderr
    assert_no_mpi_noise(run)


def test_allgather_through_tf_interleaved():
    """hbcore_tf's allgather on the hierarchical path, hosts interleaved."""
    from support.tf_launch import tensorflow_missing
    if tensorflow_missing() is not None:
        pytest.skip(str(tensorflow_missing()))
    run = launch("allgather_hosts.py", "ABA", 300, args=["tf"],
                 env={"HB_HIERARCHICAL_ALLGATHER": "1"})
    run.assert_ok()
    run.assert_cases(allgather_hosts.TF_CASES)
    assert_no_mpi_noise(run)


@pytest.mark.parametrize("layout,env,expect_on,warning", [
    ("2x2", {}, True, None),
    ("2+1", {}, True, None),
    ("ABBA", {}, True, None),
    ("2x1", {}, False, None),
    ("2x2", {"HOROVOD_HIERARCHICAL_ALLGATHER": "0"}, False, None),
    ("2x1", {"HB_HIERARCHICAL_ALLGATHER": "1"}, False,
     "HB_HIERARCHICAL_ALLGATHER=1 ignored: every host runs one rank"),
])
def test_hierarchical_allgather_choice(layout, env, expect_on, warning):
    """Automatic where the job spans hosts and some host runs more than one
    rank, whatever the placement; the Horovod alias turns it off; forcing it
    where every host runs one rank says why it does not apply."""
    env = dict(env, HB_LOG_LEVEL="DEBUG", HB_STALL_CHECK_TIME_SECONDS="30")
    run = launch("short_job.py", layout, 60, env=env)
    run.assert_ok()
    want = "on" if expect_on else "off"
    for rank, lines in state_lines(run, "hierarchical allgather").items():
        assert lines and lines[0].endswith(want), (rank, lines)
    if warning:
        assert warning in run.stderr, run.describe()
    else:
        assert "HB_HIERARCHICAL_ALLGATHER=1 ignored" not in run.stderr


def test_settings_that_must_agree_across_hosts():
    """A knob set differently on some rank (the hierarchical ones
    included, which also steer the init-time topology decision) is a
    ConfigError naming it on every rank, across hosts too; a later init
    with agreeing settings works."""
    from test_config import PER_RANK_CASES
    run = launch("config_check.py", "2x2", 120, args=["per-rank"])
    assert not run.timed_out, run.describe()
    run.assert_cases(PER_RANK_CASES)
    run.assert_ok()


PIPELINE_CASES = ["pipeline/" + c for c in ("fused-group", "multi-piece",
                                              "mixed", "half", "lone-burst",
                                              "joined", "lone-dtypes")]


@pytest.mark.parametrize("layout,env", [
    ("2x1", {}), ("2+1", {}), ("2x2", {"HB_HIERARCHICAL_ALLREDUCE": "0"}),
    ("2x2", {}), pytest.param("2x1", OVER_TCP, marks=needs_tcp),
    pytest.param("2x2", OVER_TCP, marks=needs_tcp)])
def test_pipelined_allreduces(layout, env):
    """Fused batches of several pieces through the two fusion buffers, lone
    tensors in flight together, a joined rank: numpy's results."""
    run = launch("pipeline.py", layout, 120, env=env)
    run.assert_ok()
    run.assert_cases(PIPELINE_CASES)
    assert_no_mpi_noise(run)


@pytest.mark.parametrize("layout,env", [(layout, {}) for layout in LAYOUTS]
                         + [pytest.param("2x2", OVER_TCP, marks=needs_tcp)])
def test_ordering_across_hosts(layout, env):
    run = launch("ordering.py", layout, 120, args=["order", 50], env=env)
    assert not run.timed_out, "deadlock? " + run.describe()
    run.assert_cases(["order/round0", "order/round1"])
    run.assert_ok()
    assert_no_mpi_noise(run)


def test_stress_across_hosts():
    run = launch("ordering.py", "2x2", 180, args=["stress", 200, 7])
    assert not run.timed_out, "deadlock? " + run.describe()
    run.assert_ok()
    assert not run.failed_cases(), run.failed_cases()


def test_errors_across_hosts():
    """Mismatches become MismatchError on every rank, across hosts too."""
    from test_errors import CASES
    run = launch("errors.py", "2x2", 120)
    run.assert_ok()
    run.assert_cases(CASES)
    assert_no_mpi_noise(run)


def test_stall_shutdown_across_hosts():
    """A tensor only rank 0 submits: with the stall shutdown time set,
    every rank's job ends with ShutdownError naming the tensor."""
    run = launch("stall.py", "2x2", 90, args=["shutdown"],
                 env={"HB_STALL_CHECK_TIME_SECONDS": "1",
                      "HB_STALL_SHUTDOWN_TIME_SECONDS": "2"})
    assert not run.timed_out, "the stall shutdown hung\n" + run.describe()
    assert sorted(run.results) == [0, 1, 2, 3], run.describe()
    for rank, result in run.results.items():
        assert result["outcome"] == "raised", (rank, result)
        assert result["error"]["type"] == "ShutdownError", (rank, result)
        assert "lonely" in result["error"]["message"], (rank, result)


def test_killed_rank_on_second_host_ends_the_job():
    """Rank 3 (on hB) is SIGKILLed while the others wait for it."""
    run = launch("failure.py", "2x2", 60, args=["sigkill", 3])
    assert not run.timed_out, run.describe()
    assert run.duration < 20, run.describe()
    assert run.returncode not in (0, None), run.describe()
    assert "rank 3 failed first" in run.stderr, run.describe()
    assert "SIGKILL" in run.stderr, run.describe()


def assert_short_jobs_finish(count, env):
    """`count` jobs of one 4 MB allreduce per rank at 2 x 2: each ends within
    SHORT_JOB_S, with the right result, and MPI prints nothing."""
    slow = []
    for i in range(count):
        run = launch("short_job.py", "2x2", 60,
                     env=dict(env, HB_STALL_CHECK_TIME_SECONDS="30"))
        run.assert_ok()
        assert_no_mpi_noise(run)
        for rank, result in run.results.items():
            assert result["value"] == 4.0, (rank, result)
        if run.duration >= SHORT_JOB_S:
            slow.append("job %d: %.1f s" % (i, run.duration))
    assert not slow, "jobs that took %s s or more: %s" % (SHORT_JOB_S, slow)


@pytest.mark.quiet  # each job is timed against SHORT_JOB_S: run alone
@pytest.mark.timeout(900)  # 50 launches, each with its own 60 s limit
def test_short_jobs_never_stall():
    assert_short_jobs_finish(SHORT_JOBS, {})


@needs_tcp
@pytest.mark.quiet  # timed like test_short_jobs_never_stall
@pytest.mark.timeout(300)  # TCP_SHORT_JOBS launches, each limited to 60 s
def test_short_jobs_never_stall_over_tcp():
    """Over TCP a wake-up or request that nobody progresses would hold a
    job until the stall check."""
    assert_short_jobs_finish(TCP_SHORT_JOBS, OVER_TCP)


def test_tf_training_across_hosts():
    """N-rank Keras/tape/v1 training equals one process on the whole batch,
    with the ranks on two hosts."""
    from support.tf_launch import (case_names, launch as tf_launch,
                                   tensorflow_missing)
    if tensorflow_missing() is not None:
        pytest.skip(str(tensorflow_missing()))
    hbrun_args, env = emulated_hosts(LAYOUTS["2x1"])
    run = tf_launch("train_equivalence.py", 2, env=env, timeout=300,
                    hbrun_args=hbrun_args)
    run.assert_ok()
    legacy = set(case_names("train_equivalence.py", "LEGACY_ONLY"))
    run.assert_cases([c for c in case_names("train_equivalence.py")
                      if c not in legacy])
    assert_no_mpi_noise(run)
