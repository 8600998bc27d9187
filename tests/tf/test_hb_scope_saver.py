"""A tf.compat.v1.train.Saver created inside hb.scope records relative
paths in its ``checkpoint`` state file (HybridBackend's scope sets
``save_relative_paths=True``), so the checkpoint directory can be moved
and still restored; an explicit ``save_relative_paths=False`` and Savers
created outside the scope keep TF's absolute paths; Saver.__init__ is
TF's again once the scope closes (world size 1, a fresh process).
"""

import pytest

from support.harness import python_result
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

CODE = r"""
import json, os, shutil, tempfile
import tensorflow as tf
import hbcore_tf as hb
V1 = tf.compat.v1
plain_init = V1.train.Saver.__init__

def save_move_restore(in_scope, **kwargs):
    d = tempfile.mkdtemp(prefix="hb_saver_")
    with tf.Graph().as_default():
        v = V1.get_variable("v", initializer=tf.constant([1.0, 2.0]))
        if in_scope:
            with hb.scope():
                saver = V1.train.Saver(**kwargs)
        else:
            saver = V1.train.Saver(**kwargs)
        with V1.Session() as sess:   # saved after the scope closed
            sess.run(v.initializer)
            saver.save(sess, os.path.join(d, "model.ckpt"), global_step=1)
    with open(os.path.join(d, "checkpoint")) as f:
        recorded = f.readline().split(":", 1)[1].strip().strip('"')
    moved = d + "_moved"
    shutil.move(d, moved)
    with tf.Graph().as_default():
        v = V1.get_variable("v", shape=[2])
        restorer = V1.train.Saver()
        with V1.Session() as sess:
            path = V1.train.latest_checkpoint(moved)
            try:
                restorer.restore(sess, path)
                restored = sess.run(v).tolist()
            except Exception as exc:
                restored = type(exc).__name__
    return {"recorded": recorded, "restored": restored}

out = {"scope": save_move_restore(True),
       "plain": save_move_restore(False),
       "explicit_false": save_move_restore(True, save_relative_paths=False),
       "restored_init": V1.train.Saver.__init__ is plain_init}
print("RESULT " + json.dumps(out))
"""


def test_saver_relative_paths_in_scope():
    result = python_result(CODE)
    assert result["scope"] == {"recorded": "model.ckpt-1",
                               "restored": [1.0, 2.0]}, result
    for key in ("plain", "explicit_false"):
        assert result[key]["recorded"].startswith("/"), result
        # TF's absolute path points at the old directory: nothing there.
        assert result[key]["restored"] == "ValueError", result
    assert result["restored_init"] is True, result
