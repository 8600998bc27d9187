"""Autotune under hbcore_tf: rank 0's tuner (started by hbcore_tf.init,
which is hbcore.init) converges while a Keras model trains through
DistributedGradientTape, every rank applies the same parameters at the
same cycles, and training stays in sync (allreduce results against numpy,
equal weights on every rank). The numpy front end's cases are in
tests/test_autotune.py.
"""
import pytest

from support import hidden_imports
from support.tf_launch import launch, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def test_tf_job_converges_with_ranks_in_agreement():
    # The first TF launch of a session may compile the op library.
    run = launch("autotune_tf.py", 2, timeout=420, args=["10", "5"], env={
        "HB_AUTOTUNE": "1", "HB_AUTOTUNE_WARMUP_SAMPLES": "1",
        "HB_AUTOTUNE_STEPS_PER_SAMPLE": "2",
        "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "4", **hidden_imports.KEEP})
    run.assert_ok()
    zero, one = run.results[0], run.results[1]
    assert zero["converged"] is True and one["converged"] is False
    assert zero["results_ok"] and one["results_ok"]
    # 1 warm-up and 4 scored samples: 5 proposals, the same on both ranks.
    assert len(zero["history"]) == 5, zero["history"]
    assert one["history"] == zero["history"]
    assert zero["checksum"] == pytest.approx(one["checksum"], rel=1e-6)
