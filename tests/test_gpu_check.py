"""benchmarks/gpu_check.py, the one command that checks the GPU path on a
GPU, run where CI can run it: on the fake CUDA runtime and NCCL of
tests/fake_gpu with ONE device that both ranks of np 2 share (a one-GPU
machine), and its TensorFlow checks on the CPU (a CPU-only TensorFlow has
no GPU kernels to run). What only a real GPU shows: docs/gpu.md.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fake_gpu.build import build
from support.harness import base_env
from support.tf_launch import launch
from support.under_test import ROOT

BENCHMARKS = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, BENCHMARKS)

import _gpu_check_rank as rank_part  # noqa: E402
import gpu_check  # noqa: E402



def case_names(size: int) -> list:
    """The collective checks' names at ``size`` ranks (--quick)."""
    return [c.name for c in rank_part.collective_cases(0, size, 1 << 18)]


NUMPY_CASES = case_names(1)
REFUSAL = ("ranks 0 and 1 are on the same GPU (PCI bus id 00000000:01:00.0 "
           "of one host), and NCCL cannot run two ranks of a communicator on "
           "one GPU")


def test_the_command_on_one_fake_gpu_shared_by_two_ranks(tmp_path):
    fake = build()
    env = base_env({"HB_NCCL_LIBRARY": fake["nccl"],
                    "HB_CUDA_RUNTIME_LIBRARY": fake["cudart"],
                    "FAKE_CUDA_DEVICES": "1",
                    "FAKE_CUDA_SHARED_DEVICES": "1"})
    saved = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "gpu_check.py"), "--quick",
         "--no-tf", "--np", "1,2", "--timeout", "90", "--json", str(saved)],
        env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout
    # Nothing failed; TensorFlow did not run: not proven on a GPU.
    assert done.returncode == 2, out + done.stderr[-3000:]
    assert out.rstrip().endswith(
        "gpu_check: INCOMPLETE (nothing failed; 2 checks did not run on a "
        "GPU: --no-tf)"), out
    with open(saved) as f:
        saved = json.load(f)
    assert saved["exit"] == 2
    checks = saved["checks"]
    one = {c["check"]: c for c in checks if c["np"] == 1
           and c["section"] == "numpy API, GPU memory"}
    assert sorted(one) == sorted(NUMPY_CASES +
                                 ["allreduce_ float32 Sum in place"]), out
    assert all(c["status"] == "PASS" and c["device"] == "GPU 0" and
               c["detail"].startswith("max|err|") for c in one.values()), out
    # np 2: both ranks on the one GPU. Every GPU check is N/A, the refusal
    # comes on every rank within seconds, CPU collectives go on.
    two = [c for c in checks if c["np"] == 2]
    assert [(c["section"], c["status"]) for c in two] == (
        [("numpy API, GPU memory", "N/A")] * len(NUMPY_CASES) +
        [("two ranks on one GPU", "PASS")] * 2 +
        [("TensorFlow", "NOT RUN")]), out
    refused = two[len(NUMPY_CASES)]
    assert refused["check"] == "GPU allreduce refused, naming the cause"
    seconds = re.match(r"UnsupportedError after ([0-9.]+) s: ",
                       refused["detail"])
    assert seconds and float(seconds.group(1)) < 10, refused
    assert REFUSAL in refused["detail"] and REFUSAL in out, refused
    # Bandwidth: NCCL beside the host path at np 1; at np 2 the host path
    # alone, and the table says why.
    bw = saved["bandwidth"]
    assert [(b["np"], b["bytes"]) for b in bw] == [
        (1, 1 << 16), (1, 1 << 20), (2, 1 << 16), (2, 1 << 20)]
    assert all(b["nccl_busbw_GBps"] > 0 and b["host_busbw_GBps"] > 0
               for b in bw[:2]), bw
    assert all("nccl_s" not in b and b["host_busbw_GBps"] > 0
               for b in bw[2:]), bw
    assert ("np 2: no NCCL figures: refused: ranks 0 and 1 share one GPU"
            in out), out


def test_the_tensorflow_checks_on_the_cpu(tmp_path):
    """The rank part's TensorFlow checks (eager, tf.function, v1 graph,
    Keras mixed_float16, ShardedEmbedding) run at 2 ranks on the CPU, as
    --tf-on-cpu runs them where TensorFlow has no GPU: the checks
    themselves must hold before a GPU is at hand."""
    # A warm world of the tests/tf scripts' environment (an absolute path
    # is taken as it is).
    run = launch(os.path.join(BENCHMARKS, "_gpu_check_rank.py"), 2,
                 timeout=150, cache=False,
                 args=["--out", str(tmp_path), "--quick", "--tf-on-cpu"])
    assert run.returncode == 0 and not run.timed_out, run.describe()
    checks, bandwidth, _ = gpu_check.merge(
        2, gpu_check.read_ranks(str(tmp_path), 2), None)
    by_section = {}
    for c in checks:
        by_section.setdefault(c["section"], []).append(c)
    for section in ("TF eager", "TF tf.function", "TF v1 graph"):
        got = by_section[section]
        assert [c["check"] for c in got[:len(NUMPY_CASES)]] == case_names(2)
        assert all(c["status"] == "PASS" and c["device"] == "CPU"
                   for c in got), got
    assert by_section["TF v1 graph"][-1]["detail"].startswith(
        "%d hbcore ops, all on" % len(NUMPY_CASES))
    keras_row, = by_section["Keras mixed_float16"]
    assert keras_row["status"] == "PASS", keras_row
    assert "max|w_r - w_0| 0 across 2 ranks" in keras_row["detail"]
    assert [c["status"] for c in by_section["ShardedEmbedding"]] == [
        "PASS", "PASS"], by_section["ShardedEmbedding"]
    # No GPU support in this job: the GPU checks say so, and the verdict
    # is "not proven on a GPU".
    tf_gpu, = by_section["TensorFlow"]
    assert tf_gpu["status"] == "NOT RUN" and "built without CUDA" in \
        tf_gpu["detail"]
    assert {c["status"] for c in by_section["numpy API, GPU memory"]} == {
        "NOT RUN"}
    assert gpu_check.verdict(checks)[0] == 2
    assert [b["bytes"] for b in bandwidth] == [1 << 16, 1 << 20]


def _rows(statuses):
    return [{"kind": "check", "section": "s", "check": "c%d" % i,
             "device": "GPU 0", "status": s, "detail": "d%d" % i}
            for i, s in enumerate(statuses)]


def test_merge_fails_a_check_that_failed_or_went_missing_on_any_rank():
    ranks = {0: _rows(["PASS", "PASS", "PASS", "N/A"]),
             1: _rows(["PASS", "FAIL", "N/A"])}
    checks, _, _ = gpu_check.merge(3, ranks, "hbrun -np 3 timed out")
    got = [(c["check"], c["status"], c["detail"]) for c in checks]
    assert got == [
        ("c0", "FAIL", "rank 2 did not report it (the job failed)"),
        ("c1", "FAIL", "rank 2 did not report it (the job failed)"),
        ("c2", "FAIL", "rank 2 did not report it (the job failed)"),
        ("c3", "FAIL", "rank 1 did not report it (the job failed)"),
        ("hbrun -np 3", "FAIL", "hbrun -np 3 timed out")]
    checks, _, _ = gpu_check.merge(2, ranks, None)
    assert [(c["status"], c["detail"]) for c in checks[:3]] == [
        ("PASS", "d0"), ("FAIL", "rank 1: d1"),
        ("FAIL", "ranks disagree: rank 0 PASS, rank 1 N/A")]


def test_verdict_exit_status():
    def checks(*statuses):
        return [dict(r, np=1) for r in _rows(statuses)]
    assert gpu_check.verdict(checks("PASS", "N/A"))[0] == 0
    assert gpu_check.verdict(checks("PASS", "NOT RUN"))[0] == 2
    code, line = gpu_check.verdict(checks("NOT RUN", "FAIL", "PASS"))
    assert (code, line) == (1, "gpu_check: FAIL (1 of 3 checks failed)")
    assert gpu_check.verdict([])[0] == 1


def test_compare_reports_the_numbers_and_fails_on_any_difference():
    want = np.array([1.0, 2.0, 4.0], np.float32)
    assert rank_part.compare(want.copy(), want, 0.0) == "max|err| 0 <= 0"
    with pytest.raises(rank_part.CheckFailed,
                       match=r"max\|err\| 0.5 > 0 \(at 1: got 2.5, want 2"):
        rank_part.compare(np.array([1.0, 2.5, 4.0], np.float32), want, 0.0)
    with pytest.raises(rank_part.CheckFailed, match="got float64"):
        rank_part.compare(want.astype(np.float64), want, 1.0)
    with pytest.raises(rank_part.CheckFailed, match=r"\(2,\)"):
        rank_part.compare(want[:2], want, 1.0)
