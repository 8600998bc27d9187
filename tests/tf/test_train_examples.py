"""Each training example runs at -np 2 on generated data, with small sizes,
under a hard timeout, and exits 0 (the examples themselves check that the
weights are identical on every rank, and the v1 one that only rank 0 wrote
a checkpoint)."""
import os
import re
import subprocess
import sys
import time

import pytest

from support.harness import base_env, kill_tree
from support.tf_launch import ROOT, tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

TIMEOUT_S = 180
EXAMPLES = {
    "keras_mnist_style.py": ["--epochs", "2", "--steps-per-epoch", "5",
                             "--batch-size", "16"],
    "tf2_gradient_tape.py": ["--steps", "20", "--batch-size", "32"],
    "tf1_monitored_session.py": ["--steps", "20", "--batch-size", "32"],
    "hb_recsys_v1.py": ["--rows", "1500", "--epochs", "2",
                        "--eval-every", "10", "--eval-steps", "4"],
    "hb_keras_fit.py": ["--rows", "1500", "--epochs", "2"],
    "hb_feature_columns_v1.py": ["--steps", "60", "--eval-every", "30",
                                 "--eval-steps", "2"],
    "smddp_tf2_mnist.py": ["--steps", "10", "--batch-size", "16"],
    "recsys_sharded.py": ["--steps", "200", "--eval-every", "100",
                          "--eval-steps", "4"],
    "tf2_synthetic_benchmark.py": ["--model", "MobileNetV2", "--image-size",
                                   "32", "--num-classes", "10",
                                   "--batch-size", "4", "--num-iters", "2",
                                   "--num-batches-per-iter", "2",
                                   "--num-warmup-batches", "1"],
}
EXPECT = {
    "keras_mnist_style.py": "weights identical on all ranks",
    "tf2_gradient_tape.py": "weights identical on all ranks",
    "tf1_monitored_session.py": "weights identical on all ranks",
    "tf2_synthetic_benchmark.py": "Total img/sec on 2 rank(s)",
    "hb_recsys_v1.py": "weights identical on all ranks",
    "hb_keras_fit.py": "weights and AUC identical on all ranks",
    "hb_feature_columns_v1.py": "export: plain TensorFlow predictions "
                                "differ from the trained graph's",
    "smddp_tf2_mnist.py": "weights identical on all ranks",
    "recsys_sharded.py": "predictions differ from the trained model's",
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_runs_at_np2(example, tmp_path):
    command = [sys.executable, "-m", "hbcore.launcher.cli", "-np", "2",
               sys.executable, os.path.join(ROOT, "examples", example)]
    command += EXAMPLES[example]
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "2"})
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=str(tmp_path), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        pytest.fail("%s timed out after %ss\n%s\n%s" % (
            example, TIMEOUT_S, out[-3000:], err[-3000:]))
    seconds = time.monotonic() - start
    assert proc.returncode == 0, "%s exited %s after %.0fs\n%s\n%s" % (
        example, proc.returncode, seconds, out[-3000:], err[-3000:])
    assert EXPECT[example] in out, out[-3000:]
    if example == "recsys_sharded.py":
        # Its default model directory (0.7 GB of checkpoints) is removed.
        removed = re.search(r"removed (\S+) \(pass --model-dir", out)
        assert removed, out[-3000:]
        assert not os.path.exists(removed.group(1)), removed.group(1)
