"""The core's NCCL data plane, run at 2 and 3 ranks through the fake CUDA
runtime and NCCL of tests/fake_gpu (CI has no GPU): library loading,
communicator set-up, device fusion buffers, stream ordering, scaling,
uneven allgather / alltoall / reducescatter, a process set, and error
propagation (an NCCL failure injected on one rank becomes an error on every
rank, never a hang). Every GPU result is checked against numpy and against
the MPI backend's result for the same collective
(tests/rank_scripts/nccl_path.py).
"""
import os

import pytest

from fake_gpu.build import build
from support.harness import run_ranks, script_path

SCRIPT = script_path("nccl_path.py")


@pytest.fixture(scope="module")
def fake_gpu_env():
    """The environment that points hbcore at the fake libraries."""
    paths = build()
    return {"HB_NCCL_LIBRARY": paths["nccl"],
            "HB_CUDA_RUNTIME_LIBRARY": paths["cudart"]}


def check(run):
    run.assert_ok()
    assert not run.failed_cases(), run.describe()
    return run


@pytest.mark.parametrize("np_", [2, 3])
def test_collectives_on_the_nccl_path(fake_gpu_env, np_):
    env = dict(fake_gpu_env, HB_DYNAMIC_PROCESS_SETS="1",
               # Small fusion buffers: many fused batches in flight.
               HB_FUSION_THRESHOLD=str(64 * 1024))
    run = check(run_ranks(SCRIPT, np_, timeout=180, env=env,
                          args=["collectives"]))
    for rank in range(np_):
        assert run.results[rank]["nccl_built"] is True
        assert len(run.cases[rank]) == len(run.results[rank]["cases"])
    # A clean job: nothing from MPI or the fake about leftover messages.
    assert "unexpected" not in run.stderr, run.stderr[-3000:]


@pytest.mark.parametrize("np_,mode", [(2, "sync"), (3, "sync"),
                                      (3, "async")])
def test_an_nccl_failure_on_one_rank_fails_every_rank(fake_gpu_env, np_,
                                                      mode):
    # The last rank's third collective fails: "sync" returns the error from
    # the NCCL call; "async" sets the communicator's asynchronous error
    # while the peers wait inside the collective for it.
    env = dict(fake_gpu_env, FAKE_NCCL_FAIL_RANK=str(np_ - 1),
               FAKE_NCCL_FAIL_AT="3", FAKE_NCCL_FAIL_MODE=mode)
    run = check(run_ranks(SCRIPT, np_, timeout=120, env=env,
                          args=["failure"]))
    for rank in range(np_):
        assert run.cases[rank]["failure/injected"]["ok"]


def test_without_nccl_gpu_tensors_are_refused(fake_gpu_env, tmp_path):
    missing = str(tmp_path / "libnccl-missing.so.2")
    env = dict(fake_gpu_env, HB_NCCL_LIBRARY=missing)
    run = check(run_ranks(SCRIPT, 2, timeout=90, env=env, args=["missing"]))
    assert run.results[0]["nccl_built"] is False


def test_ranks_sharing_a_gpu_are_refused_on_every_rank(fake_gpu_env):
    # Ranks 0 and 2 of 3 on one of two GPUs every process sees (NCCL would
    # refuse them with ncclInvalidUsage): an UnsupportedError naming them
    # and the GPU on every rank, at the communicator's set-up, no hang.
    env = dict(fake_gpu_env, FAKE_CUDA_SHARED_DEVICES="1",
               FAKE_CUDA_DEVICES="2", HB_DYNAMIC_PROCESS_SETS="1")
    run = check(run_ranks(SCRIPT, 3, timeout=90, env=env, args=["shared"]))
    for rank in range(3):
        assert len(run.cases[rank]) == 4, run.describe()


def test_the_nccl_benchmark_runs(fake_gpu_env):
    # benchmarks/nccl.py on the fake: both rows measured, one table (the
    # figures say nothing about a GPU; the benchmark's code path does).
    from support.under_test import ROOT
    run = run_ranks(os.path.join(ROOT, "benchmarks", "nccl.py"), 2,
                    timeout=120, env=fake_gpu_env,
                    args=["--quick", "--max-bytes", "65536"])
    assert run.returncode == 0, run.describe()
    lines = [line.split(":", 1)[-1] for line in run.stdout.splitlines()
             if line.startswith("[0]")]
    assert any("vs raw NCCL (ctypes), 2 ranks" in line for line in lines)
    rows = [line.split() for line in lines if line.split()
            and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [4, 16, 64, 256, 1024, 4096, 16384,
                                         65536]
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
