"""tf_keras legacy optimizers' ``get_gradients`` returns reduced gradients
under DistributedOptimizer (Horovod 0.28.1's horovod/_keras override), at 2
and 3 ranks, in a tf.compat.v1 graph and in a tf.function
(tests/tf/rank_scripts/keras_legacy_get_gradients.py): values against the
numpy mean (or sum) of every rank's own gradient, with the wrapper's op,
sparse_as_dense, process set, predivide factor and compression, and
applying them once does not reduce them a second time.
"""
import pytest

from train_util import (TF_KERAS_SKIP, case_names, launch, tensorflow_missing,
                        tf_keras_env, tf_keras_path)

pytestmark = [
    pytest.mark.skipif(tensorflow_missing() is not None,
                       reason=str(tensorflow_missing())),
    pytest.mark.skipif(tf_keras_path() is None, reason=TF_KERAS_SKIP),
]

SCRIPT = "keras_legacy_get_gradients.py"
NPS = [2, 3]
MODES = ["graph", "function"]
TIMEOUT_S = 240


def mode_run(np_, mode):
    return launch(SCRIPT, np_, timeout=TIMEOUT_S, env=tf_keras_env(),
                  args=(mode,))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, mode):
    """Every rank finishes, exits 0 and reports."""
    mode_run(np_, mode).assert_ok()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_, mode, case):
    mode_run(np_, mode).assert_cases([case])
