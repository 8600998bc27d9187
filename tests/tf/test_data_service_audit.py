"""Regression tests of hbcore_tf.data.compute_service / _service_rpc /
compute_worker found in an audit against Horovod's tf.data service
integration:

- a client with a wrong key (a stale config file) killed the compute
  service's accepting thread, so every later training process hung in its
  handshake; it now gets a ConnectionError naming the address and the key,
  and the service keeps answering;
- ``TfDataServiceConfig.read(f) == config`` after ``config.write(f)`` (a
  dataclass in Horovod, compared by value); a failed write leaves no
  temporary file; ``read(timeout=None)`` waits without a limit;
- ``tf_data_service`` stops the training-side dispatcher it started when
  the wait for the compute job's workers fails;
- the compute job removes its config file when it ends, and stops on
  request also before training-side dispatchers registered;
- round_robin reads are distributed_epoch (each element produced once, not
  once per worker) and apply only with reuse_dataset (Horovod);
- each shared dataset (reuse_dataset=True) reads a job of its own.

The multi-process tests run a 2-rank compute job and a training job of 2
and 3 ranks.
"""
import json
import os
import socket
import threading
import time

import pytest

from train_util import launch, tensorflow_missing

from data_service_util import (TIMEOUT_S, call_in_thread, finish, kill_tree,
                               leftovers, run_code, start_compute_job,
                               wait_for_config)

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def _port(address):
    return int(address.rsplit(":", 1)[1])


def test_wrong_key_client_does_not_stop_the_service():
    from hbcore_tf.data._service_rpc import (ComputeServiceClient,
                                             ComputeServiceServer, new_key)

    server = ComputeServiceServer(new_key())
    try:
        # A connection that never completes the handshake, then one with
        # another compute job's key (a stale config file).
        silent = socket.create_connection(("127.0.0.1",
                                           _port(server.address)))
        stale = ComputeServiceClient(server.address, new_key())
        with pytest.raises(ConnectionError) as info:
            call_in_thread(lambda: stale.call("ping"))
        message = str(info.value)
        assert server.address in message and "key" in message, message
        assert "stale" in message, message
        # The service still answers the clients that hold its key.
        for _ in range(2):
            good = ComputeServiceClient(server.address, server.key)
            assert call_in_thread(lambda: good.call("ping")) is True
            good.close()
        silent.close()
    finally:
        server.close()


def test_config_write_read_round_trip(tmp_path):
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(2, 3, "training", ["host-a:1234"], "00ff",
                                 timeout=7.5, reuse_dataset=True,
                                 round_robin=True)
    path = tmp_path / "compute.json"
    config.write(str(path))
    read = TfDataServiceConfig.read(str(path))
    assert read == config
    assert read.to_dict() == config.to_dict()
    assert hash(read) == hash(config)
    assert read != TfDataServiceConfig(2, 3, "training", ["host-a:1234"],
                                       "00fe", timeout=7.5,
                                       reuse_dataset=True, round_robin=True)
    assert read != config.to_dict()
    assert os.listdir(str(tmp_path)) == ["compute.json"]


def test_write_failure_leaves_no_temporary_file(tmp_path):
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(1, 1, "compute", ["h:1"], "00")
    config.key = object()  # not JSON-serializable: json.dump fails midway
    with pytest.raises(TypeError):
        config.write(str(tmp_path / "compute.json"))
    assert os.listdir(str(tmp_path)) == []


def test_training_side_dispatcher_stopped_when_workers_never_come():
    from hbcore_tf.data._service_rpc import ComputeServiceServer, new_key
    from hbcore_tf.data.compute_service import (TfDataServiceConfig,
                                                tf_data_service)

    server = ComputeServiceServer(new_key())
    try:
        config = TfDataServiceConfig(1, 1, "training", [server.address],
                                     server.key, timeout=1)
        with pytest.raises(TimeoutError) as info:
            with tf_data_service(config, 0):
                pytest.fail("entered without any worker")
        assert "tf.data workers of dispatcher 0" in str(info.value)
        address = server._dispatchers[0]  # registered by tf_data_service
        # Its dispatcher is stopped: nothing listens on its port any more.
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", _port(address)),
                                         timeout=2).close()
            except OSError:
                break
            assert time.monotonic() < deadline, (
                "the dispatcher at %s still runs after tf_data_service "
                "failed" % address)
            time.sleep(0.1)
    finally:
        server.close()


def test_compute_job_removes_its_config_file(tmp_path):
    """A compute job (2 ranks) is stopped by a training process; its
    config file is gone afterwards, so the next training job waits for the
    next compute job's file instead of reading this one's address."""
    config = tmp_path / "compute.json"
    compute = start_compute_job(config)
    try:
        wait_for_config(config, compute)
        code = (
            "from hbcore_tf.data.compute_service import TfDataServiceConfig\n"
            "TfDataServiceConfig.read(%r).compute_client().shutdown()\n"
            % str(config))
        run_code(code, tmp_path, timeout=TIMEOUT_S)
        rc, _, err = finish(compute)
    finally:
        kill_tree(compute.pid)
    assert rc == 0, err[-3000:]
    assert not config.exists(), json.loads(config.read_text())
    assert leftovers(config) == []


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
def test_stop_request_before_training_side_dispatchers(tmp_path, np_):
    """A compute job with training-side dispatchers is asked to stop
    before any dispatcher registered (the training job failed before
    tf_data_service): it exits 0 instead of waiting for the dispatchers
    forever, and leaves no process behind."""
    config = tmp_path / "compute.json"
    compute = start_compute_job(config, np_=np_,
                                args=["--dispatcher-side", "training"])
    try:
        wait_for_config(config, compute)
        run_code(
            "from hbcore_tf.data.compute_service import TfDataServiceConfig\n"
            "TfDataServiceConfig.read(%r).compute_client().shutdown()\n"
            % str(config), tmp_path, timeout=TIMEOUT_S)
        code, _, err = finish(compute, timeout=60)
    finally:
        kill_tree(compute.pid)
    assert code == 0, err[-3000:]
    assert leftovers(config) == []


def test_read_without_a_time_limit(tmp_path, monkeypatch):
    """timeout=None waits without a limit (Horovod's read has none): a file
    that a writer creates once the reader is waiting is read."""
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(1, 2, "compute", ["h:1"], "00", timeout=3)
    path = str(tmp_path / "compute.json")
    config.write(path)
    assert TfDataServiceConfig.read(path, True, timeout=None) == config
    os.remove(path)
    # Handshake: the writer writes once the reader looked for the file.
    looked = threading.Event()
    real_exists = os.path.exists

    def exists(name):
        if name == path:
            looked.set()
        return real_exists(name)

    monkeypatch.setattr(os.path, "exists", exists)
    writer = threading.Thread(target=lambda: (looked.wait(30),
                                              config.write(path)))
    writer.start()
    try:
        got = call_in_thread(lambda: TfDataServiceConfig.read(
            path, wait_for_file_creation=True, timeout=None), timeout=30)
    finally:
        writer.join(30)
    assert looked.is_set() and got == config


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


def test_compute_client_registrations_as_horovod():
    """A dispatcher id keeps its first address: registering another one
    is a ValueError naming both (its workers serve the first, so readers
    of the second would wait forever); a worker id counts once
    (register_worker_for_dispatcher(dispatcher_id, worker_id), Horovod's
    signature); wait_for_shutdown() returns once a stop was asked."""
    from hbcore_tf.data._service_rpc import ComputeServiceServer, new_key
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    server = ComputeServiceServer(new_key())
    try:
        config = TfDataServiceConfig(1, 2, "training", [server.address],
                                     server.key, timeout=0.5)
        client = config.compute_client()
        client.register_dispatcher(0, "host-a:1")
        client.register_dispatcher(0, "host-a:1")  # the same: fine
        with pytest.raises(ValueError) as info:
            client.register_dispatcher(0, "host-b:2")
        assert "host-a:1" in str(info.value), str(info.value)
        assert "host-b:2" in str(info.value), str(info.value)
        assert client.wait_for_dispatcher_registration(0, 1) == "host-a:1"

        client.register_worker_for_dispatcher(0, 5)
        client.register_worker_for_dispatcher(0, 5)
        with pytest.raises(TimeoutError):  # one worker of the two
            client.wait_for_dispatcher_worker_registration(0)
        client.register_worker_for_dispatcher(0, 6)
        client.wait_for_dispatcher_worker_registration(0)

        waiter = config.compute_client()
        done = threading.Event()
        thread = threading.Thread(
            target=lambda: (waiter.wait_for_shutdown(), done.set()),
            daemon=True)
        thread.start()
        assert not done.wait(0.2)  # still waiting: no stop asked yet
        other = config.compute_client()
        other._rpc.call("shutdown")
        assert done.wait(20), "wait_for_shutdown did not return"
        thread.join(20)
    finally:
        server.close()
