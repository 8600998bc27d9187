"""hbcore_tf(.keras) against horovod.tensorflow(.keras) 0.28, round 2
(tests/tf/rank_scripts/horovod_parity_round2.py), with Keras 3 and with
tf_keras (TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is
not importable), at 2 and 3 ranks under a hard timeout: load_model of
built-in optimizers (tf_keras: current and legacy, .keras and .h5) and
with Horovod's config-function custom_objects in the .keras format (the
loaded optimizer averages gradients over the ranks), custom loss
functions loaded unchanged, and the ImportError of the unsupported
hvd.elastic state and callbacks; and, with tf_keras in a tf.compat.v1 graph (eager execution
disabled), load_model of a legacy optimizer from .h5.
"""
import pytest

from train_util import (TF_KERAS_SKIP, assert_flavor_ran, case_names,
                        flavor_launch, keras_flavors, launch,
                        tensorflow_missing, tf_keras_env, tf_keras_path)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "horovod_parity_round2.py"
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


@pytest.mark.skipif(tf_keras_path() is None, reason=TF_KERAS_SKIP)
@pytest.mark.parametrize("case", case_names(SCRIPT, "GRAPH_CASES"))
@pytest.mark.parametrize("np_", NPS)
def test_graph_case(np_, case):
    run = launch(SCRIPT, np_, env=tf_keras_env(), args=["--graph"],
                 timeout=TIMEOUT_S)
    run.assert_ok()
    run.assert_cases([case])
