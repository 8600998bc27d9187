"""DistributedOptimizer for Keras 3 and tf.compat.v1 optimizers, at 2 and 3
ranks: one hbrun launch per rank count runs every case of
tests/tf/rank_scripts/train_optimizers.py (each rank checks its variables
against numpy); each test below asserts one case on every rank.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "train_optimizers.py")
