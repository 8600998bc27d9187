"""Gradients of every hbcore_tf collective at 2 and 3 ranks, in eager mode,
in a tf.function and in a tf.compat.v1 Session.run (grappler on), against
numpy (tests/tf/rank_scripts/tf_grads.py).

Every collective a gradient creates must run on every rank: a gradient
that lets grappler prune its collective on some ranks (the broadcast
gradient did, on non-root ranks) leaves the others waiting. The stall
shutdown below turns such a hang into failed cases within seconds.
"""
import pytest

from support.tf_launch import case_names, op_launch

NPS = [2, 3]
MODES = case_names("tf_grads.py", "MODES")
CASES = case_names("tf_grads.py", "CASES")


def grads_run(np_):
    """The launch for np_ ranks, run once per test session."""
    return op_launch("tf_grads.py", np_)


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    grads_run(np_).assert_ok()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("np_", NPS)
def test_gradients(np_, mode):
    """Every op's gradient (broadcast with root 0 and root size - 1)
    matches Horovod 0.28's analytic value on every rank."""
    grads_run(np_).assert_cases(["grad/%s/%s" % (mode, c) for c in CASES])
