"""Randomly drawn schedules of collectives (rank_scripts/random_schedule.py):
mixes of dtypes, reduce ops, scale factors, sizes, names, process sets,
wait orders and rank-divergent requests that the hand-written tests do not
combine, each result checked against numpy, on one host and across
emulated hosts, with the response cache and fusion buffer small enough to
evict and split.

Checked that it can fail: with allreduce's prescale factor off by 0.1% for
tensors of more than 100000 elements (hbcore/ops.py), a 3-rank run of 200
steps (seed 7) reported wrong values at steps 73, 120 and 168.
"""
import pytest

from support.harness import emulated_hosts, run_ranks, script_path

SCRIPT = script_path("random_schedule.py")
STEPS = 200

# layout: (ranks, (hbrun flags, environment), seed)
LAYOUTS = {
    "2 ranks": (2, ([], {}), 1),
    "3 ranks": (3, ([], {}), 2),
    "3 ranks, small cache and fusion buffer": (
        3, ([], {"HB_CACHE_CAPACITY": "2", "HB_FUSION_THRESHOLD": "65536"}),
        3),
    "2+1 emulated hosts": (3, emulated_hosts([2, 1]), 4),
    "2 x 2 emulated hosts": (4, emulated_hosts([2, 2]), 5),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_random_schedule_matches_numpy(layout):
    np_, (hbrun_args, env), seed = LAYOUTS[layout]
    # The plain layouts run in the warm worlds of their rank count
    # (harness.run_ranks' warm); the others would have a world each for
    # their one job, so they keep a fresh one.
    run = run_ranks(SCRIPT, np_, timeout=240, args=[seed, STEPS], env=env,
                    hbrun_args=hbrun_args, warm=not env and not hbrun_args)
    run.assert_ok()
    for rank, result in sorted(run.results.items()):
        assert result["failure_count"] == 0, (
            "rank %d: %d wrong results, first: %s" % (
                rank, result["failure_count"], result["failures"]))
        # Every rank takes part in most operations: a schedule that checked
        # little would prove little.
        # (3.3 to 4.5 a step at 200 steps, seeds 1 to 7.)
        assert result["checked"] >= 2 * STEPS, (rank, result)
        # The error path ran here too.
        assert result["mismatches"] > 0, (rank, result)
