"""Timeline: HB_TIMELINE (or hbrun --timeline-filename) writes a Chrome
trace with negotiation, fusion copy and collective phases per tensor;
start_timeline / stop_timeline (Horovod's) record between the calls, and
cycle markers come with mark_cycles or HB_TIMELINE_MARK_CYCLES."""
import importlib.util
import json
import os
from collections import defaultdict

import pytest

from support.harness import run_ranks, script_path

SCRIPT = script_path("timeline_ops.py")
TENSORS = ["tl.single", "tl.group.0", "tl.group.1", "tl.group.2",
           "tl.async.0", "tl.async.1", "tl.async.2", "tl.gather", "tl.bcast"]


def _load(path, run):
    assert os.path.exists(path), "no timeline written\n" + run.describe()
    with open(path) as f:
        text = f.read()
    try:
        trace = json.loads(text)
    except ValueError as exc:
        raise AssertionError("timeline is not valid JSON (%s):\n%s"
                             % (exc, text[-2000:]))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert isinstance(events, list) and events, trace
    return events


@pytest.mark.parametrize("how", ["env", "flag"])
def test_timeline_is_a_chrome_trace(tmp_path, how):
    path = str(tmp_path / "tl.json")
    if how == "env":
        run = run_ranks(SCRIPT, 2, timeout=60, env={"HB_TIMELINE": path})
    else:
        run = run_ranks(SCRIPT, 2, timeout=60,
                        hbrun_args=["--timeline-filename", path])
    run.assert_ok()
    run.assert_cases(["timeline/ops"])
    events = _load(path, run)

    track_of = {}  # pid -> tensor name
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            track_of[e["pid"]] = e["args"]["name"]
    missing = [t for t in TENSORS if t not in track_of.values()]
    assert not missing, "no process_name metadata for %s (have %s)" % (
        missing, sorted(track_of.values()))

    phases = defaultdict(set)  # tensor -> phase names
    for e in events:
        if e.get("ph") != "X":
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert e["pid"] in track_of, "event on a track without a name: %s" % e
        phases[track_of[e["pid"]]].add(e["name"])
    names = set().union(*phases.values())
    for phase in ("NEGOTIATE", "ALLREDUCE", "ALLGATHER",
                  "MEMCPY_IN_FUSION_BUFFER"):
        assert phase in names, "no %s event; phases: %s" % (phase,
                                                            dict(phases))
    for t in TENSORS:
        assert "NEGOTIATE" in phases[t], (t, phases[t])
    assert "ALLGATHER" in phases["tl.gather"], phases["tl.gather"]
    assert "ALLREDUCE" in phases["tl.single"], phases["tl.single"]
    # The grouped tensors are negotiated together and so fused: they go
    # through the fusion buffer.
    for t in ("tl.group.0", "tl.group.1", "tl.group.2"):
        assert {"ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER"} <= phases[t], (
            t, phases[t])


DYNAMIC_SCRIPT = script_path("timeline_dynamic.py")


def _tracks(events):
    return {e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "process_name"}


def _has(tracks, name):
    """Whether a track is named ``name`` (TF may prefix a scope)."""
    return any(t == name or t.endswith("/" + name) for t in tracks)


@pytest.mark.parametrize("np_,front,setting", [
    (2, "numpy", None), (3, "numpy", "DYNAMIC"),
    pytest.param(2, "tf", "DYNAMIC", marks=pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None,
        reason="tensorflow is not installed"))])
def test_start_and_stop_timeline(tmp_path, np_, front, setting):
    """Horovod's hvd.start_timeline / stop_timeline: rank 0 records
    between the calls only, a second start switches files, mark_cycles adds
    CYCLE_START markers, and HOROVOD_TIMELINE=DYNAMIC (Horovod's setting
    for this) opens no file of that name."""
    env = {} if setting is None else {"HOROVOD_TIMELINE": setting}
    # The numpy front without a setting runs in the warm world of np_
    # ranks (harness.run_ranks' warm): the timeline starts and stops within
    # the job. The tf front imports TensorFlow, which a numpy world must
    # not keep, and a setting would have a world for this one job.
    run = run_ranks(DYNAMIC_SCRIPT, np_, timeout=120 if front == "tf" else 60,
                    env=env, args=[str(tmp_path), front],
                    warm=front == "numpy" and setting is None)
    run.assert_ok()
    run.assert_cases(["timeline/before-init", "timeline/record",
                      "timeline/errors"])
    assert not os.path.exists("DYNAMIC") and not os.path.exists(
        str(tmp_path / "DYNAMIC"))
    assert sorted(os.listdir(str(tmp_path))) == ["first.json",
                                                 "second.json"], run.describe()
    first = _load(str(tmp_path / "first.json"), run)
    second = _load(str(tmp_path / "second.json"), run)
    tracks = _tracks(first)
    for i in range(3):
        assert _has(tracks, "tl.first.%d" % i), tracks
    for name in ("tl.before", "tl.second", "tl.after", "tl.after-errors"):
        assert not _has(tracks, name), (name, tracks)
    assert any(e.get("name") == "CYCLE_START" and e.get("ph") == "i"
               for e in first), "no cycle markers in the first file"
    tracks = _tracks(second)
    assert _has(tracks, "tl.second"), tracks
    for name in ("tl.first.0", "tl.after", "tl.after-errors"):
        assert not _has(tracks, name), (name, tracks)
    assert not any(e.get("name") == "CYCLE_START" for e in second)


def test_mark_cycles_knob(tmp_path):
    """HB_TIMELINE_MARK_CYCLES (hbrun --timeline-mark-cycles, as
    horovodrun's) marks cycles in the HB_TIMELINE file."""
    path = str(tmp_path / "tl.json")
    run = run_ranks(SCRIPT, 2, timeout=60,
                    hbrun_args=["--timeline-filename", path,
                                "--timeline-mark-cycles"])
    run.assert_ok()
    events = _load(path, run)
    assert any(e.get("name") == "CYCLE_START" for e in events), events[:5]
