"""hbcore_tf.keras against horovod.tensorflow.keras 0.28's documented
behaviour (tests/tf/rank_scripts/keras_parity.py), with Keras 3 and with
tf_keras (TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is
not importable), at 2 and 3 ranks: LearningRateScheduleCallback's constant
multiplier (initial_lr * m ** (epoch - start_epoch)), its required
initial_lr and steps_per_epoch=0, the warmup's end line printed by rank 0
only, BroadcastGlobalVariablesCallback(local_variables=...),
BestModelCheckpoint, and hvd.reducescatter / the process-set names.
"""
import pytest

from train_util import (assert_flavor_ran, case_names, flavor_launch,
                        keras_flavors, tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "keras_parity.py"
NPS = [2, 3]
TIMEOUT_S = 300


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    assert_flavor_ran(flavor_launch(SCRIPT, np_, flavor, TIMEOUT_S), flavor)


@pytest.mark.parametrize("case", case_names(SCRIPT))
@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_case(np_, flavor, case):
    flavor_launch(SCRIPT, np_, flavor, TIMEOUT_S).assert_cases([case])
