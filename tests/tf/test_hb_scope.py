"""hb.scope, @hb.function, hb.wraps and hb.train (HybridBackend API) at 2
and 3 ranks, with Keras 3 and tf_keras (TF_USE_LEGACY_KERAS=1; skipped
with the reason when tf_keras is not importable): one hbrun launch per
(rank count, Keras) runs every case of tests/tf/rank_scripts/hb_scope.py,
where each rank compares its weights with plain single-process TensorFlow
trained on the whole batch from rank 0's initial values (the ranks start
from different ones). The tf.compat.v1 cases do not depend on Keras and
run in the Keras 3 launch only.
"""
import pytest

from train_util import (assert_flavor_ran, case_names, flavor_launch,
                        keras_flavors, tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "hb_scope.py"
NPS = [2, 3]
V1_CASES = case_names(SCRIPT, "V1_CASES")
KERAS_CASES = case_names(SCRIPT, "KERAS_CASES")


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    """Every rank finishes, exits 0 and reports, with the intended Keras."""
    assert_flavor_ran(flavor_launch(SCRIPT, np_, flavor), flavor)


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", V1_CASES)
def test_v1_case(np_, case):
    flavor_launch(SCRIPT, np_, "keras3").assert_cases([case])


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", KERAS_CASES)
def test_keras_case(np_, flavor, case):
    flavor_launch(SCRIPT, np_, flavor).assert_cases([case])
