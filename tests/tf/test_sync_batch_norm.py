"""hvd.SyncBatchNormalization at 2 and 3 ranks, with Keras 3 and tf_keras
(TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is not
importable): one hbrun launch per (rank count, Keras) runs every case of
tests/tf/rank_scripts/sync_batch_norm.py, where each rank compares its
layer with plain BatchNormalization on the concatenation of every rank's
batch; each test below asserts one case on every rank. A model with
SyncBatchNormalization compiled with jit_compile=True trains without XLA
(Keras 3; a case of the launch of test_functions.py).
"""
from test_functions import SCRIPT as FUNCTIONS_SCRIPT
from test_functions import TIMEOUT_S as FUNCTIONS_TIMEOUT_S
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF

test_launch_is_clean, test_case, _ = rank_script_tests(
    "sync_batch_norm.py", flavors=("keras3", "tf_keras"), timeout=300)

_, test_jit_compile_case, _ = rank_script_tests(
    FUNCTIONS_SCRIPT, env=STALL_FAST_ENV, timeout=FUNCTIONS_TIMEOUT_S,
    cases=["sync_bn_fit_jit_compile"])
