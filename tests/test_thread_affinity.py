"""HB_THREAD_AFFINITY (Horovod's HOROVOD_THREAD_AFFINITY, hbrun
--thread-affinity): each rank's background thread runs on the CPU listed
for its local rank, the main thread keeps its CPU set, and a bad value
fails init on every rank with a ConfigError naming the variable."""
import os

import pytest

from support.harness import run_ranks, script_path

SCRIPT = script_path("thread_affinity.py")
CPUS = sorted(os.sched_getaffinity(0))


def _run(np_, value, via="env"):
    if via == "env":
        run = run_ranks(SCRIPT, np_, timeout=60,
                        env={"HOROVOD_THREAD_AFFINITY": value})
    else:
        run = run_ranks(SCRIPT, np_, timeout=60,
                        hbrun_args=["--thread-affinity", value])
    run.assert_ok()
    return [run.results[r] for r in range(np_)]


@pytest.mark.parametrize("np_, via", [(2, "env"), (3, "flag")])
def test_background_thread_is_pinned(np_, via):
    # Local rank r gets the r-th entry: the last CPU first, so that no
    # rank's pin could pass by being the whole set.
    wanted = [CPUS[(len(CPUS) - 1 - r) % len(CPUS)] for r in range(np_)]
    results = _run(np_, ",".join(str(c) for c in wanted), via)
    for rank, result in enumerate(results):
        assert result["init"] == "ok", result
        assert result["background_cpus"] == [wanted[result["local_rank"]]], (
            rank, result)
        assert result["main_cpus"] == CPUS, (rank, result)
        assert result["sum"] == [np_, np_], result


def test_unset_leaves_the_thread_unpinned():
    # HB_BIND_RANKS=0: on a 2-CPU host its default would bind both ranks
    # (test_rank_binding.py).
    run = run_ranks(SCRIPT, 2, timeout=60, env={"HB_BIND_RANKS": "0"})
    run.assert_ok()
    for rank in range(2):
        assert run.results[rank]["background_cpus"] == CPUS


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("value, fragment", [
    ("0", "names 1 CPU(s), but this host runs"),
    ("0,x,1", "is not a comma-separated list of CPU ids"),
    ("0,,1", "is not a comma-separated list of CPU ids"),
    ("4096,4096,4096", "may not run on CPU 4096"),
])
def test_bad_value_fails_init_on_every_rank(np_, value, fragment):
    results = _run(np_, value)
    for rank, result in enumerate(results):
        assert result["init"] == "failed", (rank, result)
        error = result["error"]
        assert error["type"] == "ConfigError", (rank, error)
        assert "HB_THREAD_AFFINITY" in error["message"], (rank, error)
        assert fragment in error["message"], (rank, error)
