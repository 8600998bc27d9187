"""tf_keras legacy optimizers' ``get_gradients`` returns reduced gradients
under DistributedOptimizer (Horovod 0.28.1's horovod/_keras override), at 2
and 3 ranks, in a tf.compat.v1 graph and in a tf.function
(tests/tf/rank_scripts/keras_legacy_get_gradients.py): values against the
numpy mean (or sum) of every rank's own gradient, with the wrapper's op,
sparse_as_dense, process set, predivide factor and compression, and
applying them once does not reduce them a second time.
"""
from support.tf_launch import REQUIRES_TF, rank_script_tests

pytestmark = REQUIRES_TF

# tf_keras only (legacy optimizers); one launch per rank count and mode.
test_launch_is_clean, test_case, _ = rank_script_tests(
    "keras_legacy_get_gradients.py", flavors=("tf_keras",), timeout=240,
    args=("graph",))
test_function_launch_is_clean, test_function_case, _ = rank_script_tests(
    "keras_legacy_get_gradients.py", flavors=("tf_keras",), timeout=240,
    args=("function",))
