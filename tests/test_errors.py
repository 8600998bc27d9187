"""Errors, by exception type and message, on every rank (2 and 3 ranks).

tests/rank_scripts/errors.py runs every case on every rank:
- local/*: raised on the calling rank before any communication
  (NotInitializedError before init, DuplicateNameError, invalid roots,
  bad alltoall splits, Adasum, unsupported dtypes, an object that cannot
  be pickled, ...), and one handle
  waited on by two threads (both get the one result);
- mismatch/*: rank 0 disagrees with the others about a tensor (shape,
  dtype, op type, root, reduce op, scale factors, ...): every rank must get
  MismatchError naming the tensor, all ranks and what differed, and the
  next allreduce must still be right.
"""
import pytest

from support.harness import cached_ranks, script_path

NPS = [2, 3]
LOCAL = ["before-init", "duplicate-name", "empty-name", "invalid-root",
         "alltoall-splits", "adasum", "unsupported-dtype",
         "scalar-needs-a-dimension", "inplace-needs-writeable-array",
         "bool-average", "unpicklable-object", "still-works",
         "two-waiters-one-result"]
MISMATCH = ["shape", "dtype", "optype", "root", "reduceop", "prescale",
            "postscale", "gather-trailing", "bcast-shape", "rs-shape",
            "rs-op", "a2a-trailing", "cached-then-changed", "in-fused-batch",
            "grouped"]
CASES = ["local/" + c for c in LOCAL] + ["mismatch/" + c for c in MISMATCH]

def errors_run(np_):
    # Errors are raised by the API and the negotiation, within the job:
    # the warm world of np_ ranks runs it (harness.run_ranks' warm).
    return cached_ranks(script_path("errors.py"), np_, timeout=90,
                        warm=True)


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    run = errors_run(np_)
    run.assert_ok()
    for rank in range(np_):
        assert sorted(run.cases[rank]) == sorted(CASES), (
            "rank %d ran cases %s" % (rank, sorted(run.cases[rank])))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("np_", NPS)
def test_error_case(np_, case):
    errors_run(np_).assert_cases([case])
