"""DistributedOptimizer's arguments are all checked before anything is
changed: a call that fails leaves no setting behind for the next init()
(bucket_cap_mb, given before init, defers the fusion threshold)."""
import os
import subprocess
import sys

import pytest

from support.harness import base_env
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

CODE = r"""
import hbcore.basics
import hbcore_tf as hvd
import tensorflow as tf

try:
    hvd.DistributedOptimizer(object(), bucket_cap_mb=8)
except ValueError as e:
    print("REFUSED", e)
print("AFTER FAILURE", sorted(hbcore.basics._deferred))
hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), bucket_cap_mb=8)
print("AFTER SUCCESS", sorted(hbcore.basics._deferred))
"""


def test_failed_call_defers_nothing(tmp_path):
    """Before init: an optimizer hbcore cannot wrap is refused with a
    ValueError, and the fusion threshold of its bucket_cap_mb is not
    deferred; a call that succeeds defers it."""
    out = subprocess.run([sys.executable, "-c", CODE],
                         env=base_env({"TF_CPP_MIN_LOG_LEVEL": "3"}),
                         cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("REFUSED") for line in lines), out.stdout
    assert "AFTER FAILURE []" in lines, out.stdout
    assert "AFTER SUCCESS ['fusion_threshold']" in lines, out.stdout
