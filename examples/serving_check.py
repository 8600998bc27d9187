"""Shared by the examples that export a SavedModel (recsys_sharded.py,
hb_feature_columns_v1.py): predict a fixed sample with the trained graph,
then with the export in a plain TensorFlow process, and compare.

Run from the examples folder's scripts (``python examples/<name>.py`` puts
this folder on sys.path).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1


class PredictAtEnd(v1.train.SessionRunHook):
    """Predicts a fixed sample when training ends (a collective when the
    model has sharded tables: every rank runs it)."""

    def __init__(self, probs: tf.Tensor, feed: dict) -> None:
        self.probs, self.feed, self.values = probs, feed, None

    def end(self, session: v1.Session) -> None:
        self.values = session.run(self.probs, self.feed)


def served_difference(export_dir: str, sample: dict,
                      expected: np.ndarray) -> float:
    """Runs the SavedModel's ``serving_default`` on ``sample`` in a plain
    TensorFlow process (hbcore is not imported there) and returns the
    largest difference of its ``probability`` output from ``expected``;
    exits with TensorFlow's error when the export does not load."""
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(os.path.join(tmp, "sample.npz"), **sample)
        code = (
            "import json, sys, numpy as np, tensorflow as tf\n"
            "m = tf.saved_model.load(sys.argv[1])\n"
            "f = m.signatures['serving_default']\n"
            "s = dict(np.load(sys.argv[2]))\n"
            "out = f(**{k: tf.constant(v) for k, v in s.items()})\n"
            "print(json.dumps(out['probability'].numpy().tolist()))\n"
            "assert 'hbcore' not in sys.modules\n")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        out = subprocess.run(
            [sys.executable, "-c", code, export_dir,
             os.path.join(tmp, "sample.npz")], cwd=tmp, env=env,
            capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            sys.exit("loading the export with plain TensorFlow failed:\n"
                     + out.stderr[-3000:])
        served = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    return float(np.max(np.abs(served - expected)))
