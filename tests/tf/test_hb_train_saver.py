"""hb.train.Saver (hbcore_tf/train/saver.py).

1. World size 1, one plain process: TF's Saver with HybridBackend's
   overrides (sharded and allow_empty forced, arguments positional or by
   name), hb.scope's defaults inherited, a checkpoint's values, errors.
2. hbrun at 2 and 3 ranks (hard timeout, short stall shutdown) runs every
   case of tests/tf/rank_scripts/hb_train_saver.py: every rank calls save
   and rank 0 alone writes a dense checkpoint; the Saver in
   hb.train.MonitoredTrainingSession (rank-0-only save of a dense graph,
   collective save of a sharded one); sharded tables saved whole and
   restored row block by row block.
"""
from support.harness import python_result
from support.tf_launch import REQUIRES_TF, STALL_FAST_ENV, rank_script_tests

pytestmark = REQUIRES_TF


CODE = r"""
import json, os, shutil, tempfile
import numpy as np
import tensorflow as tf
import hbcore_tf as hb
V1 = tf.compat.v1
out = {}
d = tempfile.mkdtemp(prefix="hb_train_saver_")
value = np.array([3.0, -1.0, 0.25], np.float32)

with tf.Graph().as_default():
    w = V1.get_variable("w", initializer=tf.constant(value))
    plain = hb.train.Saver(None, False, False, 2)   # positional sharded=False
    named = hb.train.Saver(sharded=False, max_to_keep=3)
    with hb.scope(keep_checkpoint_max=1):
        scoped = hb.train.Saver()
        explicit = hb.train.Saver(max_to_keep=4, save_relative_paths=False)
    out["subclass"] = isinstance(plain, V1.train.Saver)
    out["sharded"] = [s.saver_def.sharded for s in (plain, named, scoped)]
    out["keep"] = [s._max_to_keep for s in (plain, named, scoped, explicit)]
    out["relative"] = [s._save_relative_paths
                       for s in (plain, scoped, explicit)]
    with V1.Session() as sess:
        sess.run(w.initializer)
        out["path"] = scoped.save(sess, os.path.join(d, "m"), global_step=7)
        sess.run(w.assign(tf.zeros([3])))
        scoped.restore(sess, out["path"])
        out["restored"] = sess.run(w).tolist()
out["files"] = sorted(os.listdir(d))
out["saved"] = tf.train.load_variable(os.path.join(d, "m-7"), "w").tolist()
with open(os.path.join(d, "checkpoint")) as f:
    out["state"] = f.readline().strip()

with tf.Graph().as_default():   # no variables: allowed, saves nothing
    empty = hb.train.Saver()
    with V1.Session() as sess:
        out["empty_save"] = empty.save(sess, os.path.join(d, "e"))

errors = {}
for label, call in (("unknown", lambda: hb.train.Saver(bogus=1)),
                    ("twice", lambda: hb.train.Saver([], var_list=[]))):
    try:
        call()
        errors[label] = None
    except Exception as exc:
        errors[label] = [type(exc).__name__, str(exc)]
out["errors"] = errors
shutil.rmtree(d)
print("RESULT " + json.dumps(out))
"""


def test_world_size_one():
    out = python_result(CODE)
    assert out["subclass"] is True
    # HybridBackend forces sharded=True whatever the caller passes.
    assert out["sharded"] == [True, True, True]
    # Positional max_to_keep=2, named 3, the scope's option 1, and an
    # explicit argument beats the scope.
    assert out["keep"] == [2, 3, 1, 4]
    assert out["relative"] == [False, True, False]
    assert out["path"].endswith("/m-7")
    assert out["files"] == ["checkpoint", "m-7.data-00000-of-00001",
                            "m-7.index", "m-7.meta"]
    assert out["state"] == 'model_checkpoint_path: "m-7"'
    assert out["saved"] == [3.0, -1.0, 0.25]
    assert out["restored"] == [3.0, -1.0, 0.25]
    assert out["empty_save"] is None
    assert out["errors"]["unknown"][0] == "TypeError"
    assert "bogus" in out["errors"]["unknown"][1]
    assert out["errors"]["twice"][0] == "TypeError"
    assert "var_list" in out["errors"]["twice"][1]


test_launch_is_clean, test_case, _ = rank_script_tests(
    "hb_train_saver.py", timeout=200, env=STALL_FAST_ENV)
