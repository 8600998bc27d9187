"""Horovod 0.28.1 parity of hbcore_tf.functions, hbcore_tf.compression and
hvd.SyncBatchNormalization at 2 and 3 ranks (Keras 3): the root of
broadcast_object keeps its own object, Compression.fp16 keeps
IndexedSlices and SparseTensor, a model with SyncBatchNormalization
compiled with jit_compile=True trains without XLA
(tests/tf/rank_scripts/tf_functions_audit.py).
"""
import pytest

from train_util import case_tests, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "tf_functions_audit.py"
NPS = [2, 3]


def run(np_):
    return op_launch(SCRIPT, np_)


test_launch_is_clean, test_case = case_tests(SCRIPT, run, NPS)
