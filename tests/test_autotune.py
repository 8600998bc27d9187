"""Autotune (HB_AUTOTUNE): every rank applies the same parameters at the
same cycle, explicitly set knobs stay fixed, bad values fail init naming
the knob, the CSV log and the plot, and a job that ends before tuning
converged. One launch per layout (2 ranks, 3 ranks, 2 x 2 emulated hosts)
runs all of its cases (rank_scripts/autotune.py); the optimiser, the log
and the plot are also checked alone, in this process.
"""
import os
import sys

import pytest

from support import hidden_imports
from support.harness import emulated_hosts, run_python, run_ranks, script_path
from rank_scripts.autotune import BAD

from hbcore.autotune import COLUMNS, plot, read_log
from hbcore.autotune.__main__ import main as autotune_main
from hbcore.autotune.log import LogWriter
from hbcore.autotune.optimizer import BayesOptimizer
from hbcore.autotune.space import PARAMETERS, Space

PNG_MAGIC = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
START = {"fusion_threshold": 128 << 20, "cycle_time": 1.0,
         "cache_enabled": True, "hierarchical_allreduce": False,
         "hierarchical_allgather": False, "ring_allreduce": False,
         "pipeline_piece_bytes": 0}


def tuning_env(tmp_path, warmup, steps, samples, **extra):
    env = {"HB_AUTOTUNE": "1", "HB_AUTOTUNE_LOG": str(tmp_path / "tune.csv"),
           "HB_AUTOTUNE_WARMUP_SAMPLES": str(warmup),
           "HB_AUTOTUNE_STEPS_PER_SAMPLE": str(steps),
           "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": str(samples)}
    env.update(hidden_imports.KEEP)  # rank 0's optimiser is scikit-learn's
    env.update(extra)
    return env


def check_run(run, np):
    """Every rank finished, its results matched numpy, its bad-value cases
    passed, and all ranks applied the same parameters at the same cycles.
    Returns rank 0's report."""
    assert run.returncode == 0 and not run.timed_out, run.describe()
    assert sorted(run.results) == list(range(np)), run.describe()
    zero = run.results[0]
    for rank, out in run.results.items():
        assert out["results_ok"], "rank %d: wrong results" % rank
        failed = {k: v["error"] for k, v in out["cases"].items()
                  if not v["ok"]}
        assert not failed, "rank %d: %s" % (rank, failed)
        assert sorted(out["cases"]) == sorted("bad/" + b[0] for b in BAD)
        assert out["history"] == zero["history"], (
            "rank %d applied %s, rank 0 %s" % (rank, out["history"],
                                               zero["history"]))
        assert out["current"] == zero["history"][-1][1]
    cycles = [c for c, _ in zero["history"]]
    assert cycles == sorted(set(cycles)), cycles
    return zero


def check_log(zero, history_rows):
    """The log's header and sample rows, against the applied history: row
    i measured the parameters in force before proposal i."""
    assert zero["log_header"] == ",".join(COLUMNS)
    rows = [r for r in zero["log_rows"] if r["phase"] != "best"]
    assert [int(r["sample"]) for r in rows] == list(
        range(1, len(rows) + 1))
    measured = [h[1] for h in zero["history"]][:len(rows) - 1]
    for row, params in zip(rows[1:], measured):
        assert int(row["fusion_threshold_bytes"]) == params[
            "fusion_threshold"]
        assert float(row["tensor_fusion_threshold"]) == pytest.approx(
            params["fusion_threshold"] / 2.0 ** 20, rel=1e-5)
        assert int(row["cache_enabled"]) == int(params["cache_enabled"])
        assert float(row["score"]) > 0 and float(row["seconds"]) > 0
    assert len(rows) == history_rows
    assert zero["png_head"] == PNG_MAGIC and zero["png_bytes"] > 10000
    return rows


def bit(zero, name):
    return bool(zero["mask"] & zero["tune_bits"][name])


def test_two_ranks_converge_with_cycle_time_fixed(tmp_path):
    env = tuning_env(tmp_path, warmup=1, steps=3, samples=5,
                     HB_CYCLE_TIME="2")
    zero = check_run(run_ranks(script_path("autotune.py"), 2, timeout=150,
                               env=env, args=["10", "6"]), 2)
    # 1 warm-up and 5 scored samples, each followed by one proposal; the
    # last is final.
    assert len(zero["history"]) == 6, zero["history"]
    assert not bit(zero, "cycle_time") and bit(zero, "fusion_threshold")
    assert {h[1]["cycle_time"] for h in zero["history"]} == {2.0}
    assert len({h[1]["fusion_threshold"] for h in zero["history"]}) >= 3
    rows = check_log(zero, 6)
    assert [r["phase"] for r in rows] == ["warmup"] + ["sample"] * 5
    best = [r for r in zero["log_rows"] if r["phase"] == "best"]
    assert len(best) == 1
    final = zero["history"][-1][1]
    assert int(best[0]["fusion_threshold_bytes"]) == final["fusion_threshold"]
    # The best row names the sample that measured the final choice.
    chosen = rows[int(best[0]["sample"]) - 1]
    assert chosen["fusion_threshold_bytes"] == best[0][
        "fusion_threshold_bytes"]
    assert chosen["score"] == best[0]["score"]


def test_three_ranks_job_ends_before_convergence(tmp_path):
    env = tuning_env(tmp_path, warmup=0, steps=3, samples=50,
                     HB_FUSION_THRESHOLD="1048576")
    zero = check_run(run_ranks(script_path("autotune.py"), 3, timeout=150,
                               env=env, args=["14", "2"]), 3)
    assert not bit(zero, "fusion_threshold") and bit(zero, "cache_enabled")
    assert len(zero["history"]) >= 2
    assert {h[1]["fusion_threshold"] for h in zero["history"]} == {1048576}
    rows = check_log(zero, len([r for r in zero["log_rows"]]))
    assert {r["phase"] for r in rows} == {"sample"}  # no "best" row


def test_hosts_2x2_tune_switches_with_allgather_fixed(tmp_path):
    hbrun_args, env = emulated_hosts([2, 2])
    env.update(tuning_env(tmp_path, warmup=0, steps=2, samples=6,
                          HB_HIERARCHICAL_ALLGATHER="1"))
    zero = check_run(run_ranks(script_path("autotune.py"), 4, timeout=180,
                               env=env, args=["10", "6"], hbrun_args=hbrun_args),
                     4)
    assert bit(zero, "hierarchical_allreduce") and bit(zero, "ring_allreduce")
    assert bit(zero, "pipeline_piece_bytes")
    assert not bit(zero, "hierarchical_allgather")
    assert {h[1]["hierarchical_allgather"] for h in zero["history"]} == {True}
    # The spread points turn the switches both ways.
    assert {h[1]["hierarchical_allreduce"] for h in zero["history"]} == {
        True, False}
    check_log(zero, 6)
    assert [r["phase"] for r in zero["log_rows"]][-1] == "best"


def test_horovod_alias_bad_value_names_the_variable():
    run = run_python("import hbcore; hbcore.init()", env={
        "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "loud"})
    assert run.returncode != 0, run.describe()
    assert "ConfigError: invalid value for " \
        "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE: 'loud'" in run.stderr, \
        run.stderr


def test_space_round_trips_and_clips():
    space = Space(START, [p.name for p in PARAMETERS])
    x = space.encode(START)
    assert space.decode(x)["fusion_threshold"] == 128 << 20
    assert space.decode(x)["cycle_time"] == 1.0
    assert space.decode(x)["pipeline_piece_bytes"] == 4 << 20
    assert space.decode([2.0] + x[1:])["fusion_threshold"] == 256 << 20
    only = Space(START, ["cache_enabled"])
    assert only.dims == 1
    assert only.decode([0.2]) == dict(START, cache_enabled=False)


def test_optimizer_finds_the_peak_and_prefers_the_model_over_luck():
    """Scores peak at a fusion threshold of 8 MiB (log-distance falloff);
    the optimiser must end within a factor 2 of it after 12 samples."""
    import math
    space = Space(START, ["fusion_threshold"])
    opt = BayesOptimizer(space, warmup=1, max_samples=12, noise=0.01)
    params, final, phases = dict(START), False, []
    while not final:
        f = params["fusion_threshold"]
        score = 1e9 * math.exp(-(math.log2(f) - 23) ** 2 / 8)
        phase, params, final = opt.observe(params, score)
        phases.append(phase)
    assert phases == ["warmup"] + ["sample"] * 12
    assert 4 << 20 <= params["fusion_threshold"] <= 16 << 20, params


def test_log_plot_and_cli(tmp_path, capsys):
    log = str(tmp_path / "t.csv")
    writer = LogWriter(log, ["fusion_threshold", "cache_enabled"])
    for i, f in enumerate([1 << 20, 4 << 20, 64 << 20]):
        writer.write(i + 1, "sample", dict(START, fusion_threshold=f),
                     1e8 * (i + 1), 0.5)
    writer.close()
    rows = read_log(log)
    assert [r["fusion_threshold_bytes"] for r in rows] == [
        str(1 << 20), str(4 << 20), str(64 << 20)]
    assert rows[1]["tensor_fusion_threshold"] == "4"
    assert rows[2]["torus_allreduce"] == "0"
    png = str(tmp_path / "t.png")
    assert autotune_main([log, "--png", png]) == 0
    assert open(png, "rb").read(8) == bytes(PNG_MAGIC)
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    assert autotune_main([str(bad), "--png", png]) == 1
    assert "is not an hbcore autotune log" in capsys.readouterr().err
    with pytest.raises(ValueError, match="holds no sample"):
        LogWriter(str(bad), []).close()
        plot(str(bad), png)
