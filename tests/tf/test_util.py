"""hbcore_tf.util is horovod.tensorflow.util: Horovod scripts and Horovod's
own tests ask ``_executing_eagerly()`` (from the module, as
``hvd.util._executing_eagerly`` and as ``hvd._executing_eagerly``) before
choosing between eager values and ``session.run``. The answers are checked
against the mode each block really runs in, in a subprocess, so the pytest
process does not import TensorFlow.
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

from support.tf_launch import tensorflow_missing
from support.under_test import import_paths

MODES = r"""
import json
import tensorflow as tf
import hbcore_tf as hvd
from hbcore_tf.util import _executing_eagerly

seen = {"same_object": hvd._executing_eagerly is _executing_eagerly
        and hvd.util._executing_eagerly is _executing_eagerly}
seen["eager"] = _executing_eagerly()

@tf.function
def traced():
    # Runs once, while tracing: a graph is being built.
    seen["tf_function"] = _executing_eagerly()
    return tf.constant(0)

traced()
with tf.Graph().as_default():
    seen["v1_graph"] = hvd.util._executing_eagerly()
seen["eager_after"] = hvd._executing_eagerly()
print("RESULT " + json.dumps(seen))
"""


@pytest.mark.skipif(tensorflow_missing() is not None,
                    reason=str(tensorflow_missing()))
def test_executing_eagerly_follows_the_mode():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        import_paths() + [env.get("PYTHONPATH", "")])
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # From outside the checkout, so an unbuilt checkout's hbcore/ does not
    # shadow the installed package (``python -c`` puts the cwd first).
    proc = subprocess.run([sys.executable, "-c", MODES], env=env,
                          capture_output=True, text=True, timeout=180,
                          cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    seen = json.loads(line[-1][len("RESULT "):])
    assert seen == {"same_object": True, "eager": True, "tf_function": False,
                    "v1_graph": False, "eager_after": True}, seen
