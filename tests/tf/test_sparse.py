"""Allreduce of tf.IndexedSlices at 2 and 3 ranks, with Keras 3 and with
tf_keras (TF_USE_LEGACY_KERAS=1), one launch per rank count and flavour
(Horovod's semantics: an allgather of values and indices; Average divides
the values by size with true division, so integer values come back as
floating values): float and integer values, Sum and Average, single and
grouped with dense tensors, eagerly, in a tf.function and in a v1
Session.run; Horovod's NotImplementedError for scale factors and Min/Max,
and a TypeError for an Average of bool values, raised before any op exists
(tests/tf/rank_scripts/tf_sparse.py).
"""
import pytest

from support.tf_launch import (STALL_FAST_ENV, assert_flavor_ran, case_names,
                               keras_flavors, launch, tf_keras_env)

NPS = [2, 3]
MODES = case_names("tf_sparse.py", "MODES")
DTYPES = case_names("tf_sparse.py", "DTYPES")
OPS = case_names("tf_sparse.py", "OPS")


def sparse_run(np_, flavor):
    """The launch for np_ ranks and a Keras flavour, run once per test
    session (a desynchronised case stalls out within seconds)."""
    env = dict(STALL_FAST_ENV)
    if flavor == "tf_keras":
        env.update(tf_keras_env())
    return launch("tf_sparse.py", np_, env=env, timeout=300)


FLAVORS = keras_flavors()


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_, flavor):
    run = sparse_run(np_, flavor)
    assert_flavor_ran(run, flavor)
    assert run.results[0]["unlisted"] == [], run.results[0]


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("np_", NPS)
def test_allreduce(np_, dtype, flavor):
    """One IndexedSlices: values and indices of every rank in rank order;
    Average divides each value by size with true division (integer values
    become float32 or float64; duplicates add up to the exact average)."""
    sparse_run(np_, flavor).assert_cases(
        ["allreduce/%s/%s/%s" % (dtype, op, mode)
         for op in OPS for mode in MODES])


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_grouped_mixed(np_, flavor):
    """Dense tensors and IndexedSlices, float and integer, interleaved in
    one grouped call: dense integer Averages truncate and keep their
    dtype, sparse ones divide truly."""
    sparse_run(np_, flavor).assert_cases(
        ["grouped-mixed/%s/%s" % (op, mode) for op in OPS for mode in MODES])


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_gradients(np_, flavor):
    """tf.gather's IndexedSlices gradient, and a DistributedGradientTape
    with gradient_predivide_factor (scales dense gradients only)."""
    sparse_run(np_, flavor).assert_cases(
        ["gather-gradient/%s" % m for m in MODES] + ["tape-predivide"])


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("np_", NPS)
def test_errors(np_, flavor):
    """Pre/postscale factors and Min/Max raise NotImplementedError with
    Horovod's message, an Average of bool values TypeError, before any op
    exists; the runtime keeps working."""
    sparse_run(np_, flavor).assert_cases(["errors/" + c for c in [
        "prescale-allreduce", "postscale-allreduce", "prescale-grouped-mixed",
        "scale-graph-creates-nothing", "min-allreduce", "max-grouped",
        "average-bool", "recovered"]])
