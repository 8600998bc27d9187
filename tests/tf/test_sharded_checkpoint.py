"""Checkpoints, resharding and export of sharded embedding tables
(tf.compat.v1 graphs; hbcore_tf/embedding/save_protocol.py), at 2 and 3 ranks.

Launches, each with a hard timeout and a short stall shutdown so that a
desynchronised collective is an error, not a hang:

1. N=2 runs every case of tests/tf/rank_scripts/sharded_checkpoint.py and
   leaves its checkpoint in a tmp directory;
2. N=3 runs them again, restoring and resuming from launch 1's N=2
   checkpoint (HB_CKPT_IN), so resharding 2 -> 3 is tested across
   processes; the N=1 plain-variable restore runs in a plain TensorFlow
   subprocess (no hbcore, no launcher) from each launch;
3. N=2 where only rank 0 calls ``saver.save`` (Horovod style): every rank
   ends with an error and the stall report names the table's save;
4. N=1, 2 and 3 save the same logical state (Saver with the table stored
   whole and in row blocks, tf.train.Checkpoint, a Keras .weights.h5
   file): the files are the same bytes at every world size.
"""
import os
import tempfile

import pytest

from support.tf_launch import (STALL_FAST_ENV, case_names, launch,
                               tensorflow_missing)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "sharded_checkpoint.py"
CASES = case_names(SCRIPT)
STEPS = 3
_n2_dir = []


def n2_checkpoint_dir() -> str:
    """The directory launch 1 copies its checkpoint into (one per session)."""
    if not _n2_dir:
        _n2_dir.append(tempfile.mkdtemp(prefix="hb_shckpt_n2_"))
    return _n2_dir[0]


def run_at(np_: int):
    if np_ == 2:
        env = {"HB_CKPT_OUT": n2_checkpoint_dir()}
    else:
        launch_n2 = run_at(2)
        launch_n2.assert_ok()
        env = {"HB_CKPT_IN": os.path.join(n2_checkpoint_dir(),
                                          "model.ckpt-%d" % STEPS),
               "HB_CKPT_IN_SIZE": "2",
               "HB_CKPT_IN_TF2": os.path.join(n2_checkpoint_dir(), "ck-1")}
    env.update(STALL_FAST_ENV)
    return launch(SCRIPT, np_, timeout=400, env=env)


@pytest.mark.parametrize("np_", [2, 3])
def test_launch_is_clean(np_):
    run_at(np_).assert_ok()


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_case(np_, case):
    run_at(np_).assert_cases([case])


def test_rank0_only_save_is_an_error_not_a_hang():
    env = {"HB_CKPT_CASES": "rank0_only", "HB_STALL_CHECK_TIME_SECONDS": "2",
           "HB_STALL_SHUTDOWN_TIME_SECONDS": "8"}
    run = launch(SCRIPT, 2, timeout=180, env=env)
    assert not run.timed_out, "the rank-0-only save hung\n" + run.describe()
    run.assert_cases(["rank0_only_save_fails"])
    error = str(run.results[0]["errors"])
    assert "sharded tables emb" in error and "every rank" in error, error
    stall = [line for line in run.rank_lines(0)
             if "Stall: tensor 'hbcore.sharded_save[emb]" in line]
    assert stall, "no stall report names the table's save\n" + run.describe()


def test_checkpoint_bytes_do_not_depend_on_the_world_size():
    env = {"HB_CKPT_CASES": "bytes"}
    env.update(STALL_FAST_ENV)
    digests = {}
    for np_ in (1, 2, 3):
        run = launch(SCRIPT, np_, timeout=240, env=env)
        run.assert_cases(["same_bytes_any_world_size"])
        digests[np_] = run.results[0]["digests"]
    assert sorted(digests[1]) == [
        "blocks/.data-00000-of-00001", "blocks/.index",
        "keras/m.weights.h5",
        "tf2/.data-00000-of-00001", "tf2/.index",
        "whole/.data-00000-of-00001", "whole/.index"], digests[1]
    assert digests[2] == digests[1], (digests[1], digests[2])
    assert digests[3] == digests[1], (digests[1], digests[3])
    assert digests[1]["blocks/.index"] != digests[1]["whole/.index"]
