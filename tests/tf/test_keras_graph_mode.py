"""tf_keras model.fit in a tf.compat.v1 graph (eager execution disabled)
with DistributedOptimizer and hbcore's Keras callbacks, at 2 and 3 ranks
(tests/tf/rank_scripts/keras_graph_mode.py): the callbacks run their
collectives in Keras' session, the averaged metrics equal the numpy mean
of the ranks' own values and every rank ends with the same weights.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# tf_keras only: the launch test also checks that the script ran under it.
test_launch_is_clean, test_case, _ = rank_script_tests(
    "keras_graph_mode.py", flavors=("tf_keras",), timeout=240)
