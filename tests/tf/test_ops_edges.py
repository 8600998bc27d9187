"""Edge cases of the hbcore_tf collectives at 2 and 3 ranks, eagerly, in a
tf.function and in a tf.compat.v1 Session.run, against numpy
(tests/tf/rank_scripts/tf_ops_edges.py): alltoall splits of a float dtype
(TypeError on every rank, as Horovod's int32-only splits), int32 splits
tensors, tensors with no elements in every op, reducescatter of fewer rows
than ranks, fractional scale factors on integers, and the gradients of
alltoall without splits, of reducescatter of fewer rows than ranks and of
allgather with no rows on one rank."""
import pytest

from support.tf_launch import case_names, op_launch

SCRIPT = "tf_ops_edges.py"
NPS = [2, 3]
MODES = case_names(SCRIPT, "MODES")
CASES = case_names(SCRIPT, "CASES")


def edges_run(np_):
    """The launch for np_ ranks, run once per test session."""
    return op_launch(SCRIPT, np_)


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    edges_run(np_).assert_ok()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("np_", NPS)
def test_case(np_, case):
    """One edge case in every mode, on every rank."""
    edges_run(np_).assert_cases(["%s/%s" % (case, m) for m in MODES])


@pytest.mark.parametrize("np_", NPS)
def test_recovered(np_):
    """The runtime still works after the cases' errors."""
    edges_run(np_).assert_cases(["recovered"])
