"""What the training ranks of hbcore_tf.data.compute_service read, as
Horovod's tf.data service integration: round_robin reads are
distributed_epoch (each element produced once, not once per worker) and
apply only with reuse_dataset; each shared dataset (reuse_dataset=True)
reads a job of its own. A 2-rank compute job and a training job of 2 and
3 ranks (tests/tf/rank_scripts/data_service_round_robin.py and
data_service_datasets.py).
"""
import pytest

from support.data_service import (TIMEOUT_S, finish, kill_tree, leftovers,
                                  start_compute_job)
from support.tf_launch import REQUIRES_TF, launch

pytestmark = REQUIRES_TF


def _round_robin_run(tmp_path, np_, mode, n, take):
    """A compute job of 2 ranks (one dispatcher, two tf.data workers) and
    data_service_round_robin.py MODE at NP ranks; the elements each
    training rank got (rank 0's report)."""
    config = tmp_path / "compute.json"
    compute = start_compute_job(config)
    try:
        run = launch("data_service_round_robin.py", np_, timeout=TIMEOUT_S,
                     args=[str(config), mode, str(n), str(take)],
                     cache=False)
        run.assert_ok()
        code, _, err = finish(compute)
    finally:
        kill_tree(compute.pid)
    assert code == 0, err[-3000:]
    assert leftovers(config) == []
    return run.results[0]["per_rank"]


@pytest.mark.parametrize("np_", [2, 3])
def test_round_robin_produces_each_element_once(tmp_path, np_):
    """round_robin reads one shared job in distributed_epoch mode, as
    Horovod does: the two compute workers split each pass of the dataset
    between them, so while less than one pass is read no element reaches
    the training ranks twice (with parallel_epochs each worker produced
    the whole dataset, and the ranks got its first elements once per
    worker)."""
    n, take = 100000, 12
    per_rank = _round_robin_run(tmp_path, np_, "shared", n, take)
    assert [len(mine) for mine in per_rank] == [take] * np_, per_rank
    seen = [i for mine in per_rank for i in mine]
    assert all(0 <= i < n for i in seen), per_rank
    assert len(set(seen)) == len(seen), per_rank


@pytest.mark.parametrize("np_", [2, 3])
def test_round_robin_without_reuse_dataset_is_a_rank_own_job(tmp_path, np_):
    """Horovod applies round_robin only with reuse_dataset: without it
    each rank reads its own job and gets every element of its (finite)
    dataset once."""
    n = 40
    per_rank = _round_robin_run(tmp_path, np_, "own", n, 0)
    for mine in per_rank:
        assert sorted(mine) == list(range(n)), per_rank


@pytest.mark.parametrize("np_", [2, 3])
def test_each_shared_dataset_reads_its_own_job(tmp_path, np_):
    """Datasets sent with reuse_dataset=True to one shared dispatcher: a
    training set (two epochs), a validation set and the training set built
    anew each deliver all of their own elements once, over the ranks; a
    second training job on the same compute job does too. With one job
    name for every shared dataset, the later datasets joined the first
    one's finished job and read nothing."""
    n = 30
    config = tmp_path / "compute.json"
    compute = start_compute_job(config)
    try:
        runs = []
        for stop in ("0", "1"):
            run = launch("data_service_datasets.py", np_, timeout=TIMEOUT_S,
                         args=[str(config), str(n), stop], cache=False)
            run.assert_ok()
            runs.append(run.results[0]["passes"])
        code, _, err = finish(compute)
    finally:
        kill_tree(compute.pid)
    assert code == 0, err[-3000:]
    train, val = list(range(n)), list(range(1000, 1000 + n // 2))
    for passes in runs:
        assert passes == [train, train, val, train], passes
    assert leftovers(config) == []
