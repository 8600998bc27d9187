"""Allreduce of tf.IndexedSlices at 2 and 3 ranks (Horovod's semantics:
an allgather of values and indices; Average divides the values by size):
float and integer values, Sum and Average, single and grouped with dense
tensors, eagerly, in a tf.function and in a v1 Session.run; Horovod's
NotImplementedError for scale factors and Min/Max, raised before any op
exists (tests/tf/rank_scripts/tf_sparse.py).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))                  # harness

from train_util import case_names, op_launch  # noqa: E402

NPS = [2, 3]
MODES = case_names("tf_sparse.py", "MODES")
DTYPES = case_names("tf_sparse.py", "DTYPES")
OPS = case_names("tf_sparse.py", "OPS")


def sparse_run(np_):
    """The launch for np_ ranks, run once per test session."""
    return op_launch("tf_sparse.py", np_)


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    run = sparse_run(np_)
    run.assert_ok()
    assert run.results[0]["unlisted"] == [], run.results[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("np_", NPS)
def test_allreduce(np_, dtype):
    """One IndexedSlices: values and indices of every rank in rank order;
    Average divides each value (truncating integers toward zero)."""
    sparse_run(np_).assert_cases(["allreduce/%s/%s/%s" % (dtype, op, mode)
                                  for op in OPS for mode in MODES])


@pytest.mark.parametrize("np_", NPS)
def test_grouped_mixed(np_):
    """Dense tensors and IndexedSlices interleaved in one grouped call."""
    sparse_run(np_).assert_cases(["grouped-mixed/%s/%s" % (op, mode)
                                  for op in OPS for mode in MODES])


@pytest.mark.parametrize("np_", NPS)
def test_gradients(np_):
    """tf.gather's IndexedSlices gradient, and a DistributedGradientTape
    with gradient_predivide_factor (scales dense gradients only)."""
    sparse_run(np_).assert_cases(["gather-gradient/%s" % m for m in MODES]
                                 + ["tape-predivide"])


@pytest.mark.parametrize("np_", NPS)
def test_errors(np_):
    """Pre/postscale factors and Min/Max raise NotImplementedError with
    Horovod's message, before any op exists; the runtime keeps working."""
    sparse_run(np_).assert_cases(["errors/" + c for c in [
        "prescale-allreduce", "postscale-allreduce", "prescale-grouped-mixed",
        "scale-graph-creates-nothing", "min-allreduce", "max-grouped",
        "recovered"]])
