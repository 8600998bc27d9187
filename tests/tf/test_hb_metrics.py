"""hb.metrics (auc over every curve and summation method, accuracy, mean),
hb.keras.metrics in model.evaluate / model.fit (Keras 3 and tf_keras) and
hb.train.EvaluationHook at 2 and 3 ranks, each rank with a different
number of examples; values checked against TF's own single-process metrics
and numpy on all ranks' examples (tests/tf/rank_scripts/hb_metrics.py).
"""
import pytest

from train_util import (assert_flavor_ran, case_names, flavor_launch,
                        keras_flavors, tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_metrics.py"
NPS = [2, 3]
KERAS_CASES = case_names(SCRIPT, "KERAS_CASES")


@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_):
    assert_flavor_ran(flavor_launch(SCRIPT, np_, "keras3"), "keras3")


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, case):
    flavor_launch(SCRIPT, np_, "keras3").assert_cases([case])


@pytest.mark.parametrize("flavor", keras_flavors()[1:])  # tf_keras
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", KERAS_CASES)
def test_tf_keras_case(np_, flavor, case):
    run = flavor_launch(SCRIPT, np_, flavor)
    assert_flavor_ran(run, flavor)
    run.assert_cases([case])
