"""hvd.elastic of hbcore_tf.keras outside hbrun's elastic driver, as
horovod.tensorflow.keras 0.28: KerasState commits and restores weights,
optimizer slots and values, and the three elastic callbacks commit and
count as Horovod's; Keras 3 and tf_keras, 2 and 3 ranks. The case runs in
the launch of test_keras_load_model.py
(tests/tf/rank_scripts/keras_load_model_elastic.py; launches are cached
per session, so running both files launches once).
"""
from test_keras_load_model import FLAVORS, SCRIPT, TIMEOUT_S
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# The launch test is test_keras_load_model.py's.
_, test_case, _ = rank_script_tests(
    SCRIPT, flavors=FLAVORS, cases=["elastic_state_and_callbacks"],
    timeout=TIMEOUT_S)
