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

from support.tf_launch import (REQUIRES_TF, TF_KERAS_SKIP, rank_script_tests,
                               tf_keras_path)

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, run = rank_script_tests(
    "partial_distributed.py", flavors=("keras3", "tf_keras"), timeout=300)


@pytest.mark.skipif(tf_keras_path() is None, reason=TF_KERAS_SKIP)
@pytest.mark.parametrize("np_", [2, 3])
def test_tape_methods_same_in_every_flavor(np_):
    """The tapes Distributed/PartialDistributedGradientTape return have the
    same methods under Keras 3 and tf_keras (each launch checked eager and
    tf.function agree; rank 0 reports the set)."""
    methods = [run(np_, flavor).results[0]["tape_methods"]
               for flavor in ("keras3", "tf_keras")]
    assert methods[0] is not None and methods[0] == methods[1], methods
    assert "get_local_and_global_gradients" in methods[0], methods[0]
