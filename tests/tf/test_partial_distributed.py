"""PartialDistributedGradientTape, hbcore_tf.keras.PartialDistributedOptimizer
and register_local_var at 2 and 3 ranks, with Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is not
importable): one hbrun launch per (rank count, Keras) runs every case of
tests/tf/rank_scripts/partial_distributed.py, where each rank compares the
shared and local weights with a plain-TensorFlow simulation of the job.
The tapes' methods (Horovod's get_local_and_global_gradients included)
must be the same with both Keras flavours.
"""
import pytest

from train_util import (TF_KERAS_SKIP, assert_flavor_ran, case_names,
                        flavor_launch, keras_flavors, tensorflow_missing,
                        tf_keras_path)

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


@pytest.mark.skipif(tf_keras_path() is None, reason=TF_KERAS_SKIP)
@pytest.mark.parametrize("np_", NPS)
def test_tape_methods_same_in_every_flavor(np_):
    """The tapes Distributed/PartialDistributedGradientTape return have the
    same methods under Keras 3 and tf_keras (each launch checked eager and
    tf.function agree; rank 0 reports the set)."""
    methods = [flavor_launch(SCRIPT, np_, flavor).results[0]["tape_methods"]
               for flavor in ("keras3", "tf_keras")]
    assert methods[0] is not None and methods[0] == methods[1], methods
    assert "get_local_and_global_gradients" in methods[0], methods[0]
