"""PartialDistributedGradientTape, hbcore_tf.keras.PartialDistributedOptimizer
and register_local_var at 2 and 3 ranks, with Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is not
importable): one hbrun launch per (rank count, Keras) runs every case of
tests/tf/rank_scripts/partial_distributed.py, where each rank compares the
shared and local weights with a plain-TensorFlow simulation of the job.
"""
import pytest

from train_util import (assert_flavor_ran, case_names, flavor_launch,
                        keras_flavors, tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "partial_distributed.py"
NPS = [2, 3]


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    """Every rank finishes, exits 0 and reports, with the intended Keras."""
    assert_flavor_ran(flavor_launch(SCRIPT, np_, flavor), flavor)


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, flavor, case):
    flavor_launch(SCRIPT, np_, flavor).assert_cases([case])
