"""hbcore_tf.keras load_model against horovod.tensorflow.keras 0.28
(tests/tf/rank_scripts/keras_load_model_elastic.py), with Keras 3 and with
tf_keras (TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is
not importable), at 2 and 3 ranks under a hard timeout: load_model of
built-in optimizers (tf_keras: current and legacy, .keras and .h5) and
with Horovod's config-function custom_objects in the .keras format (the
loaded optimizer averages gradients over the ranks), custom loss
functions loaded unchanged; and, with tf_keras in a tf.compat.v1 graph
(eager execution disabled), load_model of a legacy optimizer from .h5.
The same launch runs the hvd.elastic case of test_keras_elastic.py.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

SCRIPT = "keras_load_model_elastic.py"
FLAVORS = ("keras3", "tf_keras")
TIMEOUT_S = 300
LOAD_MODEL_CASES = [
    "load_model_both_optimizer_generations",
    "load_model_config_function_keras_format",
    "load_model_custom_loss_function_kept",
]

test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, flavors=FLAVORS, cases=LOAD_MODEL_CASES, timeout=TIMEOUT_S)

test_graph_launch_is_clean, test_graph_case, _ = rank_script_tests(
    SCRIPT, flavors=("tf_keras",), cases="GRAPH_CASES", timeout=TIMEOUT_S,
    args=["--graph"])
