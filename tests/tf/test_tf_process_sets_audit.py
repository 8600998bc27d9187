"""Gradient reduction on a process set from ranks outside it, at 2 and 3
ranks (tests/tf/rank_scripts/tf_process_sets_audit.py): as in Horovod,
DistributedGradientTape and DistributedOptimizer (Keras 3, tf.compat.v1,
hbcore_tf.keras) on a set this rank is not in return the rank's own
gradients instead of failing with InvalidArgumentError; members still
average over the set. Checked eagerly, in tf.function and in a
tf.compat.v1 graph."""
import pytest

from train_util import launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "tf_process_sets_audit.py"
CASES = ["tape_eager", "tape_function", "v1_optimizer", "keras_optimizer",
         "keras_module_optimizer"]
STALL_ENV = {"HB_STALL_CHECK_TIME_SECONDS": "5",
             "HB_STALL_SHUTDOWN_TIME_SECONDS": "30"}


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_is_clean(np_):
    launch(SCRIPT, np_, timeout=300, env=STALL_ENV).assert_ok()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("np_", [2, 3])
def test_non_member_keeps_local_gradients(np_, case):
    launch(SCRIPT, np_, timeout=300, env=STALL_ENV).assert_cases([case])
