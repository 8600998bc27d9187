"""hbcore_tf.compression as Horovod 0.28.1's at 2 and 3 ranks (Keras 3):
Compression.fp16 keeps IndexedSlices and SparseTensor (cases of the launch
of test_functions.py, tests/tf/rank_scripts/tf_functions_compression.py;
cached per session).
"""
from test_functions import SCRIPT, TIMEOUT_S
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

_, test_case, _ = rank_script_tests(
    SCRIPT, env=STALL_FAST_ENV, timeout=TIMEOUT_S,
    cases=["fp16_indexed_slices", "fp16_sparse_tensor"])
