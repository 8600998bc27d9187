"""hbcore_tf.data data sync (HybridBackend's unbalanced input) at 2 and 3
ranks, whose data lengths differ by 3 batches per rank: one hbrun launch
per (rank count, Keras flavour) runs the cases of
tests/tf/rank_scripts/hb_data_sync.py, where each rank checks step counts
and final weights against a numpy (or plain single-process TensorFlow)
simulation of exactly the examples each mode must train on. The Keras 3
launch runs every case (v1 MonitoredTrainingSession and Session, custom
loops eager and in tf.function, errors, model.fit); the tf_keras launch
(TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is not
importable) runs the model.fit cases. A hang is a failure: every launch
has a hard timeout.
"""
import pytest

from train_util import (assert_flavor_ran, case_names, flavor_launch,
                        keras_flavors, tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_data_sync.py"
NPS = [2, 3]


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    """Every rank finishes, exits 0 and reports, with the intended Keras."""
    assert_flavor_ran(flavor_launch(SCRIPT, np_, flavor), flavor)


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, case):
    flavor_launch(SCRIPT, np_, "keras3").assert_cases([case])


@pytest.mark.parametrize("flavor", keras_flavors()[1:])
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT, "FIT_CASES"))
def test_fit_case_tf_keras(np_, flavor, case):
    flavor_launch(SCRIPT, np_, flavor).assert_cases([case])
