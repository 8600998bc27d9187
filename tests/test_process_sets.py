"""Process sets of the numpy API at 3 and 4 ranks (tests/rank_scripts/
process_sets.py): overlapping sets running every collective at once beside
global ones, errors naming the set, adding and removing sets with and
without HB_DYNAMIC_PROCESS_SETS (and its HOROVOD_ alias), sets from mpi4py
communicators, and a stall or a shutdown with a set pending ending every
rank with an error instead of a hang. Values are checked against numpy on
every rank."""
import pytest

from support.harness import run_ranks, script_path

NPS = [3, 4]


def run_mode(np_, *args, env=None, timeout=120, warm=False):
    """Runs one mode of the script at np_ ranks and asserts that every
    rank ran cases and passed them all. ``warm``: in the warm world of
    np_ ranks (harness.run_ranks), for the modes about sets within a job;
    a stall or a shutdown, and the environment variables, keep a fresh
    job."""
    run = run_ranks(script_path("process_sets.py"), np_, timeout=timeout,
                    env=env, args=args, warm=warm)
    run.assert_ok()
    for rank in range(np_):
        assert run.cases.get(rank), "rank %d ran no case\n%s" % (
            rank, run.describe())
    run.assert_cases(sorted(run.cases[0]))
    return run


@pytest.mark.parametrize("np_", NPS)
def test_overlapping_sets_run_concurrently(np_):
    run = run_mode(np_, "concurrent", warm=True)
    assert sorted(run.cases[0]) == ["concurrent/ids", "concurrent/round0",
                                    "concurrent/round1"]


@pytest.mark.parametrize("np_", NPS)
def test_errors_name_the_set(np_):
    run = run_mode(np_, "errors", warm=True)
    assert len(run.cases[0]) == 6


@pytest.mark.parametrize("np_,env,how", [
    (3, {"HB_DYNAMIC_PROCESS_SETS": "1"}, ""),
    (4, {"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}, ""),
    (3, None, "init-dynamic"),
])
def test_dynamic_add_remove(np_, env, how):
    args = ("dynamic", how) if how else ("dynamic",)
    run = run_mode(np_, *args, env=env, warm=env is None)
    assert len(run.cases[0]) == 5


@pytest.mark.parametrize("np_", NPS)
def test_static_sets_refuse_add_remove(np_):
    run = run_mode(np_, "static", warm=True)
    assert len(run.cases[0]) == 2


def test_stall_in_a_set_ends_every_rank():
    run_mode(3, "stall", env={"HB_STALL_CHECK_TIME_SECONDS": "1",
                              "HB_STALL_SHUTDOWN_TIME_SECONDS": "2"},
             timeout=90)


@pytest.mark.parametrize("np_", NPS)
def test_shutdown_fails_pending_set_collectives(np_):
    run_mode(np_, "shutdown", timeout=90)
