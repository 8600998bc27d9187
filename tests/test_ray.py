"""hbcore.ray.RayExecutor on a real local Ray cluster: the actors form one
job (results equal numpy's), state lives across calls, a failing worker
fails the call with its error, shutdown leaves no process."""
import os
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(300)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "launcher_scripts"))
import hosted_fns  # noqa: E402
from support.hbcore_path import import_engine, rank_python_path  # noqa: E402
from support.procs import Watchdog, hosted_processes  # noqa: E402

ray = import_engine("ray")
from hbcore.ray import RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module (its start-up costs seconds)."""
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {
                 "PYTHONPATH": rank_python_path()}})
    yield
    ray.shutdown()


def _settings():
    return RayExecutor.create_settings(timeout_s=60)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_form_one_job_with_state_across_calls(cluster, workers):
    executor = RayExecutor(_settings(), num_workers=workers)
    with Watchdog():
        executor.start(executable_cls=hosted_fns.Counter,
                       executable_args=(10,))
        try:
            results = executor.run(hosted_fns.train_step, args=(2.0,))
            first = executor.execute(hosted_fns.bump)
            second = executor.execute(hosted_fns.bump)
            single = executor.execute_single(hosted_fns.bump)
        finally:
            executor.shutdown()
    expected = np.mean([hosted_fns.rank_data(r, 2.0) for r in range(workers)],
                       axis=0)
    assert [r["rank"] for r in results] == list(range(workers))
    assert all(r["size"] == workers for r in results)
    for got in results:
        np.testing.assert_allclose(got["average"], expected, rtol=1e-12)
        assert got["names"] == ["rank-%d" % r for r in range(workers)]
    # The same rank processes serve every call; the executable keeps its
    # state; execute_single runs on rank 0 alone.
    pids = [r["pid"] for r in results]
    assert [(r, 11, pid) for r, pid in enumerate(pids)] == first
    assert [(r, 12, pid) for r, pid in enumerate(pids)] == second
    assert single == (0, 13, pids[0])
    assert hosted_processes() == []


def test_failing_worker_fails_the_call_and_stops_the_job(cluster):
    executor = RayExecutor(_settings(), num_workers=3)
    with Watchdog():
        executor.start()
        with pytest.raises(RuntimeError) as exc:
            executor.run(hosted_fns.fail_on_rank, args=(2,))
    message = str(exc.value)
    assert ("hbcore.ray.RayExecutor: rank 2 raised ValueError: bad shard on "
            "rank 2") in message
    assert "hosted_fns.py" in message
    assert hosted_processes() == []
    with pytest.raises(RuntimeError, match="not started"):
        executor.run(hosted_fns.train_step, args=(1.0,))
    executor.shutdown()  # a second shutdown is harmless


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="give num_workers or num_hosts"):
        RayExecutor(_settings(), num_workers=2, num_hosts=2)
    with pytest.raises(ValueError, match="num_workers must be an integer"):
        RayExecutor(_settings(), num_workers=0)
    with pytest.raises(NotImplementedError, match="elastic"):
        RayExecutor(_settings(), min_workers=1, max_workers=2)


def test_workers_that_cannot_be_placed_fail_start_in_time(cluster):
    # The cluster has 3 CPUs: 4 workers of 1 CPU never fit.
    settings = RayExecutor.create_settings(timeout_s=60,
                                           placement_group_timeout_s=3)
    executor = RayExecutor(settings, num_workers=4)
    with Watchdog(60):
        with pytest.raises(RuntimeError, match=r"Ray could not place 4 "
                           r"bundles of \{'CPU': 1\} \(PACK\) within "
                           r"placement_group_timeout_s=3s"):
            executor.start()
    # Nothing was left reserved: 3 workers start now.
    executor = RayExecutor(_settings(), num_workers=3)
    with Watchdog():
        executor.start()
        try:
            assert [r["size"] for r in executor.run(
                hosted_fns.train_step, args=(1.0,))] == [3, 3, 3]
        finally:
            executor.shutdown()
    assert hosted_processes() == []
