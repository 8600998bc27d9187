"""hbcore.ray.RayExecutor on a real local Ray cluster: the actors form one
job (results equal numpy's), state lives across calls, a failing worker
fails the call with its error, shutdown leaves no process.
ElasticRayExecutor: a rank and an actor killed by SIGKILL mid-training,
the job goes on from the last commit (weights equal a replay,
tests/test_elastic.py's); a host the discovery adds joins at a commit; a
rank's error ends it with that error; limits and bad settings."""
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
from hbcore.launcher.hosts import parse_hosts  # noqa: E402
from hbcore.ray import ElasticRayExecutor, RayExecutor  # noqa: E402
from test_elastic import first_steps, replay, step_sizes  # noqa: E402


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


def _elastic(out_dir, events="", **settings):
    settings.setdefault("timeout_s", 60)
    settings.setdefault("elastic_timeout", 60)
    executor = ElasticRayExecutor(
        ElasticRayExecutor.create_settings(**settings),
        env_vars={"HB_TEST_OUT": str(out_dir), "HB_TEST_EVENTS": events})
    executor.start()
    return executor


def test_elastic_kill_9_of_a_rank_and_an_actor_goes_on_from_the_commit(
        cluster, tmp_path):
    """Three generations of 2 Ray workers (about 30 s on 2 loaded cores:
    each generation's ranks start Python and hbcore)."""
    # 2 of the node's 3 slots. Before step 3 the first rank there
    # SIGKILLs itself, before step 6 one SIGKILLs its actor: each time the
    # next generation (2 new workers) goes back to the last commit.
    node = ray.nodes()[0]["NodeManagerAddress"]
    executor = _elastic(tmp_path, "kill:%s:3,killhosting:%s:6"
                        % (node, node), max_num_proc=2)
    with Watchdog(180):
        results = executor.run(hosted_fns.elastic_job)
    assert step_sizes(str(tmp_path)) == [2] * 10
    assert first_steps(str(tmp_path)) == {0: 0, 1: 2, 2: 6}  # the commits'
    assert results == [dict(replay(str(tmp_path)), size=2, generation=2,
                            resets=[2])] * 2
    assert hosted_processes() == []


class FileDiscovery:
    """Horovod's HostDiscovery over a hosts file, one ``name:slots`` a
    line (elastic_train.py's add event writes it)."""

    def __init__(self, path):
        self.path = path

    def find_available_hosts_and_slots(self):
        with open(self.path) as f:
            hosts = parse_hosts(",".join(f.read().split()))
        return {h.name: h.slots for h in hosts}


def test_elastic_host_added_by_the_discovery_joins_at_a_commit(cluster,
                                                               tmp_path):
    """Two generations of Ray workers, 2 then 3 (about 20 s)."""
    # The user's discovery (override_discovery=False) answers the node
    # with 2 slots; after step 2 rank 0 adds host hB:1 and every rank
    # commits: the driver's notice interrupts them, and generation 1 has
    # 3 workers (max_num_proc) going on from that commit, no rollback.
    node = ray.nodes()[0]["NodeManagerAddress"]
    hosts = tmp_path / "hosts"
    hosts.write_text("%s:2\n" % node)
    settings = ElasticRayExecutor.create_settings(
        min_num_proc=2, max_num_proc=3, timeout_s=60, elastic_timeout=60)
    settings.discovery = FileDiscovery(str(hosts))
    executor = ElasticRayExecutor(
        settings, override_discovery=False,
        env_vars={"HB_TEST_OUT": str(tmp_path), "HB_TEST_EVENTS": "add:hB:2",
                  "HB_TEST_HOSTS_FILE": str(hosts)})
    executor.start()
    with Watchdog(120):
        results = executor.run(hosted_fns.elastic_job)
    assert step_sizes(str(tmp_path)) == [2] * 3 + [3] * 7
    assert first_steps(str(tmp_path)) == {0: 0, 1: 3}
    assert results == [dict(replay(str(tmp_path)), size=3, generation=1,
                            resets=[3])] * 3
    assert hosted_processes() == []


def test_elastic_rank_error_ends_the_job_and_limits_are_errors(cluster,
                                                               tmp_path):
    # A rank that raises is a bug, not a reset: its error ends the job.
    executor = _elastic(tmp_path, max_num_proc=2)
    with Watchdog(60):
        with pytest.raises(RuntimeError) as exc:
            executor.run(lambda: hosted_fns.fail_on_rank(1))
    assert ("hbcore.ray.ElasticRayExecutor: rank 1 raised ValueError: bad "
            "shard on rank 1") in str(exc.value)
    assert "generation 1" not in str(exc.value)
    # More slots than the 3 CPUs: the driver's limit, named.
    executor = _elastic(tmp_path, min_num_proc=4, elastic_timeout=1)
    with Watchdog(60):
        with pytest.raises(RuntimeError, match=r"elastic job failed: fewer "
                           r"than 4 slots \(--min-np\) for 1 s"):
            executor.run(hosted_fns.elastic_job)
    assert hosted_processes() == []


def test_elastic_bad_settings_are_refused():
    create = ElasticRayExecutor.create_settings
    with pytest.raises(ValueError, match="min_num_proc must be an integer >= 1, "
                       "got 0"):
        create(min_num_proc=0)
    with pytest.raises(ValueError, match="max_num_proc 1 is less than num_proc 2"):
        create(min_num_proc=2, max_num_proc=1)
    with pytest.raises(ValueError, match="elastic_timeout must be a positive"):
        create(elastic_timeout=0)
    with pytest.raises(TypeError, match="unexpected keyword arguments "
                       "bogus"):
        create(bogus=1)
    with pytest.warns(DeprecationWarning, match="min_np is deprecated"):
        assert create(min_np=2).min_num_proc == 2
    with pytest.raises(ValueError, match="gpus_per_slot is set, but use_gpu "
                       "is False"):
        ElasticRayExecutor(create(), gpus_per_slot=1)
    executor = ElasticRayExecutor(create())
    with pytest.raises(RuntimeError, match="not started"):
        executor.run(hosted_fns.elastic_job)
    with pytest.raises(NotImplementedError, match="callbacks"):
        executor.run(hosted_fns.elastic_job, callbacks=[print])
