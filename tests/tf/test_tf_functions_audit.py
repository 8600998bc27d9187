"""Horovod 0.28.1 parity of hbcore_tf.functions, hbcore_tf.compression and
hvd.SyncBatchNormalization at 2 and 3 ranks (Keras 3): the root of
broadcast_object keeps its own object, Compression.fp16 keeps
IndexedSlices and SparseTensor, a model with SyncBatchNormalization
compiled with jit_compile=True trains without XLA
(tests/tf/rank_scripts/tf_functions_audit.py).
"""
import pytest

from train_util import case_names, op_launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "tf_functions_audit.py"
NPS = [2, 3]


@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_: int) -> None:
    """Every rank finishes, exits 0 and reports."""
    op_launch(SCRIPT, np_).assert_ok()


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", case_names(SCRIPT))
def test_case(np_: int, case: str) -> None:
    """One case of the rank script, asserted on every rank."""
    op_launch(SCRIPT, np_).assert_cases([case])
