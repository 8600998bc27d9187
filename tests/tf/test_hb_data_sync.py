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
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# Keras 3 runs every case, tf_keras the model.fit ones.
test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_data_sync.py", flavors=("keras3", "tf_keras"), timeout=300,
    cases={"keras3": "CASES", "tf_keras": "FIT_CASES"})
