"""hbcore_tf.keras against horovod.tensorflow.keras 0.28's documented
behaviour (tests/tf/rank_scripts/keras_parity.py), with Keras 3 and with
tf_keras (TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is
not importable), at 2 and 3 ranks: LearningRateScheduleCallback's constant
multiplier (initial_lr * m ** (epoch - start_epoch)), its required
initial_lr and steps_per_epoch=0, the warmup's end line printed by rank 0
only, BroadcastGlobalVariablesCallback(local_variables=...),
BestModelCheckpoint, and hvd.reducescatter / the process-set names.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "keras_parity.py", flavors=("keras3", "tf_keras"), timeout=300)
