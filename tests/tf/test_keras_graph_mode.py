"""tf_keras model.fit in a tf.compat.v1 graph (eager execution disabled)
with DistributedOptimizer and hbcore's Keras callbacks, at 2 and 3 ranks
(tests/tf/rank_scripts/keras_graph_mode.py): the callbacks run their
collectives in Keras' session, the averaged metrics equal the numpy mean
of the ranks' own values and every rank ends with the same weights.
"""
import pytest

from train_util import (TF_KERAS_SKIP, case_tests, launch, tensorflow_missing,
                        tf_keras_env, tf_keras_path)

pytestmark = [
    pytest.mark.skipif(tensorflow_missing() is not None,
                       reason=str(tensorflow_missing())),
    pytest.mark.skipif(tf_keras_path() is None, reason=TF_KERAS_SKIP),
]

SCRIPT = "keras_graph_mode.py"
NPS = [2, 3]
TIMEOUT_S = 240


def graph_run(np_):
    return launch(SCRIPT, np_, timeout=TIMEOUT_S, env=tf_keras_env())


test_launch_is_clean, test_case = case_tests(SCRIPT, graph_run, NPS)
