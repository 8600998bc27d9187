"""Every collective x every dtype x a few shapes, at 2, 3 and 4 ranks.

One hbrun launch per rank count runs all cases of
tests/rank_scripts/collectives.py (each rank checks every result against
numpy, recomputing the other ranks' rank-seeded inputs); the tests below
each assert one group of cases ('allreduce/float16', 'misc/join', ...) on
every rank, so a failure names exactly what broke.
"""
import pytest

from support.harness import (cached_ranks, python_result, run_ranks,
                             script_path)
from rank_scripts import collectives
from rank_scripts.common import DTYPE_NAMES

NPS = [2, 3, 4]
# 4 ranks on 2 cores are slow: there, a subset of the dtypes (one of each
# kind: small int, 16-bit float via float ops, 32-bit float, bool).
DTYPES = {2: DTYPE_NAMES, 3: DTYPE_NAMES,
          4: ["int8", "bfloat16", "float32", "bool"]}
SCRIPT = script_path("collectives.py")
TIMEOUT_S = 120

# These launches run on one host, so fused allreduces reduce through node
# shared memory. One more launch lowers HB_SHM_ALLREDUCE_THRESHOLD to 64
# bytes: every fused batch larger than that is then reduced in many pieces,
# whose chunk boundaries fall inside tensors.
SHM_SPLIT_NP = 3
SHM_SPLIT_ENV = {"HB_SHM_ALLREDUCE_THRESHOLD": "64"}

def collectives_run(np_, env=None):
    """The launch for np_ ranks (and env), run once per test session: in
    the warm world of np_ ranks (the script is about the collectives; its
    lifecycle cases call init/shutdown/init within the job, and a warm job
    starts with hbcore shut down, as a fresh process does); a launch with
    an environment of its own is the only job such a world would run, so
    it keeps a fresh job."""
    return cached_ranks(SCRIPT, np_, timeout=TIMEOUT_S, env=env,
                        args=[",".join(DTYPES[np_])], warm=not env)


def _case_names(np_, group):
    return [name for name, _ in collectives.build_cases(np_, 0, DTYPES[np_])
            if name == group or name.startswith(group + "/")]


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    """The launch ends by itself, exit 0, every rank reports a summary."""
    run = collectives_run(np_)
    assert not run.timed_out, run.describe()
    assert sorted(run.results) == list(range(np_)), run.describe()
    for rank, result in run.results.items():
        assert result["size"] == np_
        assert result["cases"] == len(
            collectives.build_cases(np_, rank, DTYPES[np_])) + 2
    # The exit code: a rank exits 0 even when cases failed (they are
    # reported per group below), so nonzero means a crash.
    assert run.returncode == 0, run.describe()


@pytest.mark.parametrize("np_,group", [
    (n, g) for n in NPS for g in collectives.group_names(DTYPES[n])])
def test_group(np_, group):
    run = collectives_run(np_)
    names = _case_names(np_, group)
    assert names, "no cases in group %s" % group
    run.assert_cases(names)


@pytest.mark.parametrize("np_", NPS)
def test_is_initialized_around_init(np_):
    """is_initialized() False before init, True after."""
    collectives_run(np_).assert_cases(["lifecycle/initialized"])


@pytest.mark.parametrize("np_", NPS)
def test_after_shutdown(np_):
    """After shutdown(): is_initialized() False, rank() and collectives
    raise NotInitializedError, a second shutdown() is harmless."""
    collectives_run(np_).assert_cases(["lifecycle/after-shutdown"])


@pytest.mark.parametrize("np_", [2])
def test_reinit_after_shutdown(np_):
    """shutdown() says init() may be called again afterwards."""
    collectives_run(np_).assert_cases(["lifecycle/reinit"])


@pytest.mark.parametrize("group", [
    g for g in collectives.group_names(DTYPES[SHM_SPLIT_NP])
    if g.startswith(("allreduce", "grouped", "inplace"))])
def test_allreduce_groups_with_mpi_fused_path(group):
    """Fused batches above the shared-memory threshold go through MPI and
    give the same results."""
    run = collectives_run(SHM_SPLIT_NP, SHM_SPLIT_ENV)
    assert not run.timed_out, run.describe()
    names = _case_names(SHM_SPLIT_NP, group)
    assert names, "no cases in group %s" % group
    run.assert_cases(names)


@pytest.mark.parametrize("np_", [2, 3])
def test_pipeline_cases_on_one_host(np_):
    """The cases written for the multi-host pipeline (large fused batches,
    lone large tensors in one cycle, a joined rank) on one host, where fused
    batches reduce in shared memory: numpy's results."""
    from test_multihost import PIPELINE_CASES
    run = run_ranks(script_path("pipeline.py"), np_, timeout=120, warm=True)
    run.assert_ok()
    run.assert_cases(PIPELINE_CASES)


def test_bfloat16_is_there_once_ml_dtypes_is_imported_before_or_after():
    """hbcore does not import ml_dtypes itself (about a second of every
    new process's start, elastic re-formations included: hbcore/ops.py);
    a bfloat16 array works whether ml_dtypes came before or after hbcore,
    and a numpy-only program never loads it."""
    pytest.importorskip("ml_dtypes")
    got = python_result(
        "import json, sys\n"
        "import numpy as np\n"
        "import hbcore as hvd\n"
        "hvd.init()\n"
        "hvd.allreduce(np.ones(3, np.float32), name='f32')\n"
        "alone = 'ml_dtypes' in sys.modules\n"
        "import ml_dtypes\n"
        "x = np.arange(4).astype(ml_dtypes.bfloat16)\n"
        "y = hvd.allreduce(x, op=hvd.Sum, name='bf16')\n"
        "print('RESULT ' + json.dumps([alone, str(y.dtype),\n"
        "                              y.astype(np.float32).tolist()]))\n",
        timeout=TIMEOUT_S)
    assert got == [False, "bfloat16", [0.0, 1.0, 2.0, 3.0]]
    before = python_result(
        "import json, ml_dtypes, numpy as np, hbcore as hvd\n"
        "hvd.init()\n"
        "y = hvd.broadcast(np.ones(2, ml_dtypes.bfloat16), 0, name='b')\n"
        "print('RESULT ' + json.dumps(str(y.dtype)))\n", timeout=TIMEOUT_S)
    assert before == "bfloat16"
