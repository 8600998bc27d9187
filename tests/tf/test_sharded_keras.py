"""hb.keras.layers.ShardedEmbedding at 2 and 3 ranks, with Keras 3 and
tf_keras (TF_USE_LEGACY_KERAS=1; skipped with the reason when tf_keras is
not importable): one hbrun launch per (rank count, Keras) runs every case
of tests/tf/rank_scripts/sharded_keras.py, where each rank compares with
plain single-process Keras (keras.layers.Embedding on the whole batch) or
plain TF lookups on the whole table. The same cases also run in one
process without a launcher (world size 1, the same code path). The 2-rank
launch leaves a TensorFlow checkpoint that the 3-rank launch and the
one-process run restore (resharding 2 -> 3 and 2 -> 1 across processes).
"""
import os
import tempfile

import pytest

from support.harness import cached_run, run_single
from support.tf_launch import (SCRIPTS, STALL_FAST_ENV, _pythonpath,
                               assert_flavor_ran, case_names, keras_flavors,
                               launch, tensorflow_missing, tf_keras_env)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

SCRIPT = "sharded_keras.py"
NPS = [2, 3]
CASES = case_names(SCRIPT)


_handoff = {}


def handoff_dir(flavor):
    """Where the 2-rank launch of a flavour leaves its TensorFlow
    checkpoint (case save_tf_checkpoint_format) for the 3-rank launch and
    the one-process run to restore, resharded (one per session)."""
    if flavor not in _handoff:
        _handoff[flavor] = tempfile.mkdtemp(prefix="hb_sk_handoff_")
    return _handoff[flavor]


def handoff_in(flavor):
    """The environment of a run that restores the 2-rank checkpoint
    (after that launch ran)."""
    assert_flavor_ran(flavor_launch(SCRIPT, 2, flavor), flavor)
    return {"HB_KCKPT_IN": handoff_dir(flavor)}


def flavor_launch(script, np_, flavor):
    """The launch of a Keras flavour, with stalls turned into errors
    within seconds (a desynchronised case ends instead of hanging)."""
    env = dict(STALL_FAST_ENV)
    if flavor == "tf_keras":
        env.update(tf_keras_env())
    if np_ == 2:
        env["HB_KCKPT_OUT"] = handoff_dir(flavor)
    else:
        env.update(handoff_in(flavor))
    return launch(script, np_, env=env, timeout=400)


def single_run(flavor):
    """The script in one process without hbrun (cached per flavour)."""
    def make_run():
        env = {"PYTHONPATH": os.pathsep.join(_pythonpath()),
               "TF_CPP_MIN_LOG_LEVEL": "2"}
        env.update(handoff_in(flavor))
        if flavor == "tf_keras":
            env.update(tf_keras_env())
        return run_single(os.path.join(SCRIPTS, SCRIPT), env=env,
                          timeout=300)

    return cached_run(("test_sharded_keras single", flavor), make_run)


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_, flavor):
    """Every rank finishes (the out-of-range case included), exits 0 and
    reports, with the intended Keras."""
    assert_flavor_ran(flavor_launch(SCRIPT, np_, flavor), flavor)


@pytest.mark.parametrize("flavor", keras_flavors())
@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", CASES)
def test_case(np_, flavor, case):
    flavor_launch(SCRIPT, np_, flavor).assert_cases([case])


@pytest.mark.parametrize("flavor", keras_flavors())
def test_world_size_one_without_launcher(flavor):
    """Every case passes in a single process started without hbrun."""
    run = single_run(flavor)
    assert_flavor_ran(run, flavor)
    run.assert_cases(CASES)
