"""DistributedOptimizer(bucket_cap_mb=...) created before hvd.init() sets the
fusion threshold of the runtime init starts, through hbcore's programmatic
configuration: os.environ is never written, and init(config=...) still
wins. (After init it cuts the gradients into buckets of that size instead;
train_optimizers.py checks that.)"""
import pytest

from support.harness import run_python
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

CODE = r"""
import os, warnings
import tensorflow as tf
import hbcore_tf as hvd
from hbcore._native import core

def threshold():
    for line in core.config_string().splitlines():
        if line.startswith("HB_FUSION_THRESHOLD="):
            return int(line.split("=", 1)[1])

before = dict(os.environ)
opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                               bucket_cap_mb=2)
assert dict(os.environ) == before, "bucket_cap_mb wrote os.environ"
hvd.init()
assert threshold() == 2 * 1024 * 1024, core.config_string()
hvd.shutdown()
hvd.init(config={"fusion_threshold": 4096})
assert threshold() == 4096, core.config_string()
hvd.shutdown()
with warnings.catch_warnings():
    warnings.simplefilter("error")
    try:
        hvd.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), bucket_cap_mb=-1)
    except ValueError as e:
        assert "bucket_cap_mb must be >= 0" in str(e), e
    else:
        raise AssertionError("negative bucket_cap_mb accepted")
print("BUCKET-CAP-OK")
"""


def test_bucket_cap_mb_before_init_configures_the_runtime():
    run = run_python(CODE, timeout=180)
    assert run.returncode == 0, run.describe()
    assert "BUCKET-CAP-OK" in run.stdout, run.describe()
