"""hb.keras.layers.DynamicEmbedding (dynamic tables: int64 and string
ids, rows created on first lookup) at 1, 2 and 3 ranks with Keras 3 and
tf_keras (skipped with the reason when tf_keras is not importable): one
launch per rank count and Keras runs every case of tests/tf/rank_scripts/
dynamic_keras.py, where each rank checks rows against the per-key formula
computed in numpy, rows held per rank against the hash formula, and
training (model.fit and tf.function loops: Keras optimizers under
hvd.DistributedOptimizer, tf.compat.v1 ones under DistributedGradientTape)
against plain single-process Keras on the whole batch.
test_same_result_at_every_world_size compares what the launches trained.
Each launch takes 18-35 s on the shared 2-core machine (its world's start
and sixteen cases, of which the eight trainings take about 1 s each
alone, and the eviction case, two tables trained against the numpy dict
model with a checkpoint between, 3.5-12 s): six launches, about 3
minutes in all, for three world sizes and two Keras flavours.

test_export_served_by_plain_tf serves the SavedModel each launch's
export_for_serving case wrote (a DynamicEmbedding over int64 ids and one
over a string bag) in one plain TensorFlow process for the module (no
hbcore imported there): under a second per launch, 5-14 s more for the
process's start on the shared 2-core machine.

test_checkpoint_reshards_2_3_2 runs tests/tf/rank_scripts/
dynamic_checkpoint.py at 2, 3 and 2 ranks in turn (three launches per
Keras flavour, in the warm worlds of the launches above);
test_kill_mid_save_keeps_the_last_checkpoint kills rank 0 of a fresh
2-rank job in the middle of a save and restores at 3 ranks.
"""
import importlib.util
import json
import os
import shutil
import tempfile

import numpy as np
import pytest

from support.tf_launch import (REQUIRES_TF, SCRIPTS, STALL_FAST_ENV,
                               flavor_launch, keras_flavors, launch,
                               rank_script_tests)

pytestmark = REQUIRES_TF

NPS = (1, 2, 3)

test_launch_is_clean, test_case, run = rank_script_tests(
    "dynamic_keras.py", nps=NPS, flavors=("keras3", "tf_keras"), timeout=240,
    env=STALL_FAST_ENV)


@pytest.mark.parametrize("flavor", keras_flavors())
def test_same_result_at_every_world_size(flavor):
    """The trained tables and Dense weights of every run (1, 2 and 3
    ranks) agree with each other, on every rank."""
    reference = run(1, flavor).results[0]["trained"]
    assert sorted(reference) == ["adagrad", "adam", "loop_adagrad",
                                 "loop_v1_adagrad", "loop_v1_adam",
                                 "loop_v1_ftrl", "sgd"]
    for np_ in NPS:
        launch = run(np_, flavor)
        for rank in range(np_):
            trained = launch.results[rank]["trained"]
            assert sorted(trained) == sorted(reference)
            for what, weights in reference.items():
                for i, (mine, want) in enumerate(zip(trained[what],
                                                     weights)):
                    np.testing.assert_allclose(
                        mine, want, rtol=1e-5, atol=1e-6,
                        err_msg="np=%d rank %d %s weight %d" % (
                            np_, rank, what, i))


# The served SavedModel, run in the plain process: its one signature
# takes the int64 ids and the string words (told apart by dtype).
SERVE = r"""
import json, sys
import tensorflow as tf
path, ids, words = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
serve = tf.saved_model.load(path).signatures["serving_default"]
specs = serve.structured_input_signature[1]
feed = {name: tf.constant(ids if spec.dtype == tf.int64 else words,
                          spec.dtype) for name, spec in specs.items()}
(out,) = serve(**feed).values()
print("RESULT" + json.dumps({"pred": out.numpy().tolist()}))
"""


@pytest.fixture(scope="module")
def plain_tf():
    """One plain TensorFlow process for the module
    (tests/tf/rank_scripts/plain_tf.py: hbcore never imported there)."""
    spec = importlib.util.spec_from_file_location(
        "plain_tf", os.path.join(SCRIPTS, "plain_tf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with module.PlainTF() as plain:
        yield plain


@pytest.mark.parametrize("np_", NPS, ids=lambda n: "np%d" % n)
@pytest.mark.parametrize("flavor", keras_flavors())
def test_export_served_by_plain_tf(plain_tf, flavor, np_):
    """Plain TensorFlow serves the SavedModel of export_plain_model's
    copy of a trained model (rank 0's copy; each rank wrote its own) on
    seen and unseen int64 ids and string words: exactly the trained
    model's predictions. The first test of the module pays for the plain
    process's start (5-14 s); the others take under a second."""
    exported = run(np_, flavor).results[0]["exported"]
    assert exported, "the export_for_serving case wrote no SavedModel"
    try:
        served = plain_tf.run(SERVE, exported["path"],
                              json.dumps(exported["ids"]),
                              json.dumps(exported["words"]))
    finally:
        shutil.rmtree(os.path.dirname(exported["path"]), ignore_errors=True)
    assert not served["hbcore_imported"]
    np.testing.assert_array_equal(
        np.array(served["pred"], np.float32),
        np.array(exported["want"], np.float32))


@pytest.mark.parametrize("flavor", keras_flavors())
def test_checkpoint_reshards_2_3_2(flavor):
    """A tf.train.Checkpoint of a trained dynamic table and its Adagrad
    slots, saved at 2 ranks, restores at 3 (rows to their new owners, the
    saved tensors in key order and equal when saved again at 3), trains,
    saves, and restores at 2; every value against plain Keras (see the
    rank script), and Keras' .weights.h5 / .keras files load at 3. Three
    launches in warm worlds: 10-27 s per flavour on the shared 2-core
    machine (55-90 s when the worlds start cold), most of it TF's
    start-up and tracing."""
    directory = tempfile.mkdtemp(prefix="hb_dynckpt_")
    for np_, phase in ((2, "save_at_2"), (3, "restore_at_3"),
                       (2, "restore_at_2")):
        run = flavor_launch("dynamic_checkpoint.py", np_, flavor,
                            timeout=240, env=STALL_FAST_ENV,
                            args=(directory, phase))
        run.assert_cases([phase])


def test_kill_mid_save_keeps_the_last_checkpoint():
    """Rank 0 of a fresh 2-rank job is killed (SIGKILL) after writing its
    part of a second save, before the merge: the job ends (no hang), and
    the directory's latest checkpoint is still the first, which restores
    at 3 ranks with the rows of one step. 11-40 s (40 s with a cold
    3-rank world): a fresh job is the point (the kill ends its world)."""
    directory = tempfile.mkdtemp(prefix="hb_dynkill_")
    killed = launch("dynamic_checkpoint.py", 2, timeout=180,
                    env=STALL_FAST_ENV, args=(directory, "kill_mid_save"),
                    cache=False, fresh=True)
    assert not killed.timed_out, killed.describe()
    assert killed.returncode != 0, killed.describe()
    assert any(line.startswith("KILLING rank 0 before merging")
               for line in killed.rank_lines(0, "stdout")), killed.describe()
    assert 0 not in killed.results, killed.describe()
    run = launch("dynamic_checkpoint.py", 3, timeout=240, env=STALL_FAST_ENV,
                 args=(directory, "after_kill"))
    run.assert_cases(["after_kill"])
