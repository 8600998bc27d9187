"""The fast path for small cached allreduces (docs/architecture.md, "Small
tensors in one round trip"): recurring small Sum/Average tensors mixed with
tensors it must not carry (large, Min, prescaled), in random orders per
rank, a process set, and mismatches on cached names
(rank_scripts/fast_path_schedule.py); every value checked against numpy,
and rank 0's timeline showing which tensors were carried."""
import json

import pytest

from support.harness import emulated_hosts, run_ranks, script_path

SCRIPT = script_path("fast_path_schedule.py")
STEPS = 40
FAST = ["fp.f32", "fp.f64", "fp.i32", "fp.f16", "fp.i64avg", "fp.post",
        "fp.u8", "fp.4k", "fp.set"]
NEVER = ["slow.large", "slow.min", "slow.pre"]


def _carried(path):
    """Tensor name -> number of FAST_PATH_ALLREDUCE events on rank 0."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    track = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    counts = {}
    for e in events:
        if e.get("ph") == "X" and e["name"] == "FAST_PATH_ALLREDUCE":
            counts[track[e["pid"]]] = counts.get(track[e["pid"]], 0) + 1
    return counts


# layout: (ranks, (hbrun flags, environment)); across emulated hosts MPI
# runs the combined collective's user-defined operation over its network
# module too.
LAYOUTS = {
    "2 ranks": (2, ([], {})),
    "3 ranks": (3, ([], {})),
    "2+1 emulated hosts": (3, emulated_hosts([2, 1])),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_fast_path_mixed_schedule_matches_numpy(tmp_path, layout):
    np_, (hbrun_args, env) = LAYOUTS[layout]
    timeline = str(tmp_path / "tl.json")
    run = run_ranks(SCRIPT, np_, timeout=120, args=[np_, STEPS],
                    env=dict(env, HB_TIMELINE=timeline),
                    hbrun_args=hbrun_args)
    run.assert_ok()
    for rank, result in sorted(run.results.items()):
        assert result["failure_count"] == 0, (
            "rank %d: %d wrong results, first: %s" % (
                rank, result["failure_count"], result["failures"]))
        assert result["checked"] >= 5 * STEPS, (rank, result)
    carried = _carried(timeline)
    # Each small tensor is carried on most of its uses after the first.
    for name in FAST:
        assert carried.get(name, 0) >= 5, (name, carried)
    for name in NEVER:
        assert name not in carried, (name, carried)
