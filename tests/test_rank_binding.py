"""HB_BIND_RANKS: where a host runs one rank per CPU and nothing bound the
ranks, each rank binds its threads (those on the process's CPU set, the
ones created later too) to a CPU of its own at init, and gives them their
sets back at shutdown; a thread the program pinned keeps its set. `1`
binds every local rank to its share of the CPUs, `0` never binds. The
decision is read from the runtime's DEBUG log as well as from the threads'
CPU sets."""
import os
import re

import pytest

from support.harness import assert_bad_value_fails_init, run_ranks, script_path

SCRIPT = script_path("rank_binding.py")
CPUS = sorted(os.sched_getaffinity(0))
TWO = CPUS[:2]

needs_two_cpus = pytest.mark.skipif(
    len(CPUS) < 2, reason="binding ranks apart needs 2 CPUs")


def _share(cpus, local_rank, local_size):
    """Local rank r's share of the CPUs: [r*n/L, (r+1)*n/L), at least one."""
    n = len(cpus)
    first = local_rank * n // local_size
    end = max(first + 1, (local_rank + 1) * n // local_size)
    return cpus[first:end]


def _run(np_, env=None, cpus=TWO, args=(), hbrun_args=()):
    full_env = {"HB_LOG_LEVEL": "DEBUG"}
    full_env.update(env or {})
    run = run_ranks(SCRIPT, np_, timeout=60, env=full_env, args=args,
                    hbrun_args=hbrun_args,
                    wrapper=["taskset", "-c", ",".join(map(str, cpus))])
    run.assert_ok()
    # (what, the knob's value, why[, how many threads moved])
    decisions = re.findall(r"rank (bound to CPU [\d,]+|not bound) "
                           r"\(HB_BIND_RANKS=(\w+): ([^);]*)(?:; (\d+) "
                           r"threads)?\)", run.stdout + run.stderr)
    assert len(decisions) == np_, run.describe()
    results = [run.results[r] for r in range(np_)]
    for rank, result in enumerate(results):
        want = [np_ * (np_ + 1) / 2] * 3
        assert result["sum"] == want, (rank, result)
        # Shutdown gives every thread the set it had; the pinned one never
        # moved.
        for key in ("main_after", "plain_after", "later_after"):
            assert result[key] == result["before"], (rank, key, result)
        assert result["pinned"] == result["pinned_after"] == \
            result["pinned_before"] == [max(result["before"])], (rank, result)
    return results, decisions


def _assert_unbound(results):
    for result in results:
        for key in ("main", "plain", "later", "background"):
            assert result[key] == result["before"], (key, result)


@needs_two_cpus
def test_one_rank_per_cpu_binds_each_rank_to_its_own():
    results, decisions = _run(2)
    for result in results:
        want = [TWO[result["local_rank"]]]
        assert result["before"] == TWO, result
        for key in ("main", "plain", "later", "background"):
            assert result[key] == want, (key, result)
    assert sorted(r["main"][0] for r in results) == TWO
    for decision in decisions:
        assert decision[1:3] == ("auto", "2 CPUs for 2 local ranks"), decision
        assert int(decision[3]) >= 2, decision  # main and plain at least


@needs_two_cpus
@pytest.mark.parametrize("np_", [2, 3])
def test_forced_binding_gives_each_local_rank_its_share(np_):
    results, decisions = _run(np_, env={"HB_BIND_RANKS": "1"})
    for result in results:
        want = _share(TWO, result["local_rank"], np_)
        for key in ("main", "plain", "later", "background"):
            assert result[key] == want, (key, result)
    assert all(d[1] == "1" for d in decisions), decisions


@pytest.mark.parametrize("np_, env, why", [
    (3, {}, "2 CPUs for 3 local ranks, not one each"),
    (2, {"HB_BIND_RANKS": "0"}, "off"),
    (2, {"HB_BIND_RANKS": "false"}, "off"),
    (2, {"HB_THREAD_AFFINITY": "%d,%d" % (TWO[-1], TWO[0])},
     "HB_THREAD_AFFINITY places the background thread"),
])
@needs_two_cpus
def test_no_binding(np_, env, why):
    results, decisions = _run(np_, env=env)
    if "HB_THREAD_AFFINITY" in env:  # its own pin, and nothing else moved
        for result in results:
            assert result["background"] == \
                [[TWO[-1], TWO[0]][result["local_rank"]]], result
            result["background"] = result["before"]
    _assert_unbound(results)
    for decision in decisions:
        assert decision[0] == "not bound" and decision[2] == why, decision


@needs_two_cpus
def test_ranks_the_launcher_bound_stay_as_they_are():
    # Hydra's -bind-to core: one CPU per rank, so not one CPU per local rank.
    results, decisions = _run(2, hbrun_args=["--binding-args=-bind-to core"])
    assert sorted(r["before"][0] for r in results) == TWO, results
    _assert_unbound(results)
    for decision in decisions:
        assert decision[2] == "1 CPU for 2 local ranks, not one each", decision


@needs_two_cpus
@pytest.mark.parametrize("sets, bound", [
    # Two emulated hosts, one rank each: confined to different CPUs, the
    # sets differ; to the same one, each rank is its host's only rank on
    # its only CPU.
    (["%d" % TWO[0], "%d" % TWO[1]], False),
    (["%d" % TWO[0], "%d" % TWO[0]], True),
])
def test_ranks_on_differing_cpu_sets_stay_as_they_are(sets, bound):
    results, decisions = _run(
        2, args=sets,
        hbrun_args=["-H", "hA:1,hB:1", "--mpi-args=-launcher fork"])
    for rank, result in enumerate(results):
        assert result["local_size"] == 1, result
        assert result["before"] == [int(sets[rank])], result
    _assert_unbound(results)  # one CPU: bound or not, the same set
    for decision in decisions:
        if bound:
            assert decision[0] == "bound to CPU %s" % sets[0], decision
        else:
            assert decision[2] == ("the ranks' CPU sets differ, as the "
                                   "launcher or taskset set them"), decision


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_value_fails_init(np_):
    assert_bad_value_fails_init("HB_BIND_RANKS", "always", np_)
