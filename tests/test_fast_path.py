"""The fast path for small cached allreduces (docs/architecture.md, "Small
tensors in one round trip"): recurring small Sum/Average tensors mixed with
tensors it must not carry (large, Min, prescaled), in random orders per
rank, a process set, and mismatches on cached names
(rank_scripts/fast_path_schedule.py); every value checked against numpy,
and rank 0's timeline showing which tensors were carried."""
import json

import pytest

from support.harness import run_ranks, script_path

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


@pytest.mark.parametrize("np_", [2, 3])
def test_fast_path_mixed_schedule_matches_numpy(tmp_path, np_):
    timeline = str(tmp_path / "tl.json")
    run = run_ranks(SCRIPT, np_, timeout=120, args=[np_, STEPS],
                    env={"HB_TIMELINE": timeline})
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
