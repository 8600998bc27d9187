"""BroadcastGlobalVariablesCallback when the variables do not exist yet at
train begin (a Sequential without an input shape, whose weights the first
batch creates) or exist on some ranks only: every rank ends the first
batch with the root's initial weights. Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1), at 2 and 3 ranks
(tests/tf/rank_scripts/keras_broadcast.py).
"""
import pytest

from train_util import (TF_KERAS_SKIP, case_names, launch, tensorflow_missing,
                        tf_keras_env, tf_keras_path)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "keras_broadcast.py"
NPS = [2, 3]
TIMEOUT_S = 240
ENV = {
    # A rank left out of a broadcast becomes failed cases within seconds.
    "HB_STALL_CHECK_TIME_SECONDS": "5",
    "HB_STALL_SHUTDOWN_TIME_SECONDS": "30",
}
FLAVORS = [
    "keras3",
    pytest.param("tf_keras", marks=pytest.mark.skipif(
        tf_keras_path() is None, reason=TF_KERAS_SKIP)),
]


def broadcast_run(flavor, np_):
    env = dict(ENV)
    if flavor == "tf_keras":
        env.update(tf_keras_env())
    return launch(SCRIPT, np_, timeout=TIMEOUT_S, env=env)


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    run = broadcast_run(flavor, np_)
    run.assert_ok()
    want = "tf_keras" if flavor == "tf_keras" else "keras"
    assert run.results[0]["keras"] == want, run.results[0]


@pytest.mark.parametrize("case", case_names(SCRIPT))
@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_case(np_, flavor, case):
    broadcast_run(flavor, np_).assert_cases([case])
