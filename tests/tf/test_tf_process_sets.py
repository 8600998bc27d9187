"""hbcore_tf with process sets at 3 and 4 ranks (tests/tf/rank_scripts/
tf_process_sets.py): every collective on two overlapping sets eagerly, in
tf.function and in a tf.compat.v1 graph, gradients over the op's set,
broadcast_variables / objects, DistributedGradientTape and
DistributedOptimizer on a set, the Keras callbacks on a set, and the
errors of a non-member."""
import pytest

from train_util import launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "tf_process_sets.py"
CASES = ["eager", "tf_function", "v1_graph", "gradients", "broadcast_vars",
         "tape", "optimizer", "keras_callbacks", "non_member", "set_ops"]


@pytest.mark.parametrize("np_", [3, 4])
def test_launch_is_clean(np_):
    launch(SCRIPT, np_, timeout=300).assert_ok()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("np_", [3, 4])
def test_case(np_, case):
    launch(SCRIPT, np_, timeout=300).assert_cases([case])
