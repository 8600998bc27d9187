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
and thirteen cases, of which the eight trainings take about 1 s each
alone): six launches, about 2.5 minutes in all, for three world sizes and
two Keras flavours.

test_checkpoint_reshards_2_3_2 runs tests/tf/rank_scripts/
dynamic_checkpoint.py at 2, 3 and 2 ranks in turn (three launches per
Keras flavour, in the warm worlds of the launches above);
test_kill_mid_save_keeps_the_last_checkpoint kills rank 0 of a fresh
2-rank job in the middle of a save and restores at 3 ranks.
"""
import tempfile

import numpy as np
import pytest

from support.tf_launch import (REQUIRES_TF, STALL_FAST_ENV, flavor_launch,
                               keras_flavors, launch, rank_script_tests)

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
