"""Submission order, threads and a 500-tensor stress mix.

- order: every rank submits the same 50 tensors (mostly allreduce, some of
  every other collective) async in its own rank-seeded order, then
  synchronizes all; twice, the second time through the response cache.
- threads: 4 Python threads per rank submit 25 tensors each concurrently.
- stress (3 ranks, required; also 2 and 4): 500 tensors of random shape,
  dtype and collective, async in each rank's own order, each result
  checked against numpy; then again in another order (cached responses);
  also under small / no response cache and small / no fusion buffer.
Every check runs on every rank; a deadlock shows up as the hard timeout.
"""
import pytest

from support.harness import run_ranks, script_path

SCRIPT = script_path("ordering.py")


# The order, threads and stress launches run in the warm worlds of their
# rank count (harness.run_ranks' warm): their subject is the negotiation
# within a job. The tunings keep fresh jobs: each environment would have
# a world for its one job.


def _check(run, cases):
    assert not run.timed_out, "deadlock? " + run.describe()
    run.assert_cases(cases)
    run.assert_ok()


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_same_tensors_in_different_order(np_):
    run = run_ranks(SCRIPT, np_, timeout=60, args=["order", 50], warm=True)
    _check(run, ["order/round0", "order/round1"])


@pytest.mark.parametrize("np_", [2, 3])
def test_four_threads_per_rank(np_):
    run = run_ranks(SCRIPT, np_, timeout=90, args=["threads", 25],
                    warm=True)
    _check(run, ["threads/4-threads"])


@pytest.mark.parametrize("np_,seed", [(3, 2024), (2, 99), (4, 5)])
def test_stress_500_tensors(np_, seed):
    run = run_ranks(SCRIPT, np_, timeout=120, args=["stress", 500, seed],
                    warm=True)
    _check(run, ["stress/500-tensors", "stress/500-tensors-again"])
    kinds = run.results[0]["kinds"]
    # The mix really covers every collective and many dtypes.
    assert set(kinds) == {"allreduce", "allgather", "broadcast", "alltoall",
                          "reducescatter"} and min(kinds.values()) > 50, kinds
    assert len(run.results[0]["dtypes"]) == 11


# Small caches (evictions, or no cache at all) and small fusion buffers
# (many batches, or no fusion) must not change any result.
TUNINGS = {
    "no-cache": {"HB_CACHE_CAPACITY": "0"},
    "tiny-cache-tiny-fusion": {"HB_CACHE_CAPACITY": "4",
                               "HB_FUSION_THRESHOLD": "256"},
    "one-slot-no-fusion": {"HB_CACHE_CAPACITY": "1",
                           "HB_FUSION_THRESHOLD": "0"},
    "zero-cycle-time": {"HB_CYCLE_TIME": "0"},
    "idle-spin-on": {"HB_IDLE_SPIN": "1"},
}


@pytest.mark.parametrize("tuning", sorted(TUNINGS))
def test_stress_under_tuning(tuning):
    run = run_ranks(SCRIPT, 3, timeout=120, args=["stress", 300, 31],
                    env=TUNINGS[tuning])
    _check(run, ["stress/300-tensors", "stress/300-tensors-again"])
