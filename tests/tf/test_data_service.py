"""Horovod's tf.data service integration (hbcore_tf.data.compute_service and
compute_worker): a compute job and a training job, 2 ranks each, with
compute-side and training-side dispatchers; every element of a finite
dataset reaches training exactly once in each of two epochs
(distributed_epoch), the map function runs in the compute job's
processes, the compute job exits 0 when the training job stops it and
leaves no process behind and removes its config file, also when stopped
before training-side dispatchers registered; tf_data_service stops the
training-side dispatcher it started when the wait for the compute job's
workers fails; bad counts, a missing config file and an unreachable
compute job are errors.
"""
import json
import os
import subprocess
import sys
import socket
import threading

import psutil
import pytest

from support.data_service import (TIMEOUT_S, base_env, finish, kill_tree,
                                  launch_env, leftovers, port_of, run_check,
                                  run_code, start_compute_job, wait_for_config)
from support.tf_launch import REQUIRES_TF, ROOT, SCRIPTS
from support.waiting import wait_until

pytestmark = REQUIRES_TF

N = 60


@pytest.mark.parametrize("side", ["compute", "training"])
@pytest.mark.parametrize("mode", ["shared", "sharded"])
def test_every_element_once_map_in_compute_job(tmp_path, side, mode):
    """shared: one dispatcher and one job read by both training ranks;
    sharded: one dispatcher (and one worker) per training rank, each rank
    reading its .shard(size, rank)."""
    dispatchers = "1" if mode == "shared" else "2"
    result = run_check(tmp_path, mode, N, ["--dispatcher-side", side,
                                        "--dispatchers", dispatchers])
    # Every epoch (two are read) delivers each element to exactly one rank.
    for epoch, elements in enumerate(result["elements"]):
        assert elements == list(range(N)), (epoch, elements)
    assert len(result["elements"]) == 2, result["elements"]


def test_round_robin_reads(tmp_path):
    """round_robin=True: the training ranks read one shared job of an
    infinite dataset in rank order; each gets the elements it asks for,
    produced by the compute job, and the job still stops cleanly."""
    result = run_check(tmp_path, "round_robin", N)
    assert result["per_rank"] == [[N], [N]], result["per_rank"]
    assert set(result["elements"][0]) <= set(range(N)), result["elements"]


@pytest.mark.parametrize("side", ["compute", "training"])
def test_example_runs_2_plus_2(tmp_path, side):
    config = tmp_path / "compute.json"
    compute = start_compute_job(config, args=["--dispatcher-side", side])
    try:
        command = [sys.executable, "-m", "hbcore.launcher.cli", "-np", "2",
                   sys.executable,
                   os.path.join(ROOT, "examples", "tf2_data_service.py"),
                   str(config), "--examples", "512", "--epochs", "2"]
        train = subprocess.run(command, env=base_env(
            {"TF_CPP_MIN_LOG_LEVEL": "2"}), capture_output=True, text=True,
            timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, cwd=str(tmp_path))
        code, _, err = finish(compute)
    finally:
        kill_tree(compute.pid)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "weights identical on all ranks" in train.stdout, train.stdout
    assert code == 0, err[-3000:]
    assert leftovers(config) == []


def test_np_not_a_multiple_of_dispatchers(tmp_path):
    config = tmp_path / "compute.json"
    code, _, err = finish(start_compute_job(config, np_=3,
                                            args=["--dispatchers", "2"]))
    assert code != 0
    assert "must be a multiple of --dispatchers (2)" in err, err[-2000:]
    assert not config.exists()


def rank_process(config, rank):
    """The compute job's process of ``rank`` (found by the config path on
    its command line and MPI's PMI_RANK in its environment)."""
    def find():
        for proc in psutil.process_iter(["cmdline"]):
            try:
                line = " ".join(proc.info["cmdline"] or [])
                if ("hbcore_tf.data.compute_worker" in line
                        and str(config) in line
                        and "hbcore.launcher" not in line
                        and proc.environ().get("PMI_RANK") == str(rank)):
                    return proc
            except psutil.Error:
                pass
        return None

    return wait_until(find, TIMEOUT_S, interval=0.2,
                      what="no rank %d process of the compute job" % rank)


@pytest.mark.parametrize("rank", [0, 1])
def test_one_interrupted_rank_stops_the_compute_job(tmp_path, rank):
    """SIGTERM to one rank of the compute job (not to hbrun) stops every
    rank: the job exits 0 and leaves no process behind."""
    config = tmp_path / "compute.json"
    compute = start_compute_job(config)
    try:
        wait_for_config(config, compute)
        rank_process(config, rank).terminate()
        code, _, err = finish(compute, timeout=60)
    finally:
        kill_tree(compute.pid)
    assert code == 0, err[-3000:]
    assert leftovers(config) == []


def test_errors_without_a_compute_job(tmp_path):
    """A config file that never appears times out; a training size that
    does not match the dispatchers, an unreachable compute job and
    round_robin with several dispatchers raise, naming what is wrong."""
    missing = tmp_path / "never.json"
    dead = tmp_path / "dead.json"
    dead.write_text(json.dumps({
        "dispatchers": 2, "workers_per_dispatcher": 1,
        "dispatcher_side": "compute", "addresses": ["127.0.0.1:9"],
        "key": "00", "timeout": 5}))
    out = run_code(
        "import tensorflow as tf\n"
        "from hbcore_tf.data.compute_service import TfDataServiceConfig\n"
        "try:\n"
        "    TfDataServiceConfig.read(%r, wait_for_file_creation=True,"
        " timeout=1)\n"
        "except TimeoutError as e: print('TIMEOUT', e)\n"
        "cfg = TfDataServiceConfig.read(%r)\n"
        "ds = tf.data.Dataset.range(4)\n"
        "try: ds.send_to_data_service(cfg, 0, 3)\n"
        "except ValueError as e: print('SIZE', e)\n"
        "try: ds.send_to_data_service(cfg, 0, 2)\n"
        "except ConnectionError as e: print('GONE', e)\n"
        "try: ds.send_to_data_service(cfg, 0, 2, reuse_dataset=True,"
        " round_robin=True)\n"
        "except ValueError as e: print('ROUND_ROBIN', e)\n"
        % (str(missing), str(dead)), tmp_path)
    assert "TIMEOUT" in out and "did not appear within 1" in out, out
    assert "SIZE" in out and "2 dispatchers" in out and "3 ranks" in out, out
    assert "GONE" in out and "127.0.0.1:9" in out, out
    # Named before any wait on the (unreachable) job.
    assert "ROUND_ROBIN" in out and "one shared dispatcher" in out, out



def test_training_ends_when_the_compute_job_dies(tmp_path):
    """The compute job is killed while the training process reads from it:
    the training process exits non-zero, naming the lost compute job,
    instead of waiting on the tf.data service forever."""
    config = tmp_path / "compute.json"
    started = tmp_path / "started"
    compute = start_compute_job(config)
    command = [sys.executable, "-m", "hbcore.launcher.cli", "-np", "1",
               sys.executable,
               os.path.join(SCRIPTS, "data_service_reader.py"),
               str(config), str(started)]
    train = subprocess.Popen(command, env=launch_env(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             errors="replace", start_new_session=True,
                             cwd=str(tmp_path))
    try:
        def reader_started():  # handshake: the reader got an element
            if started.exists():
                return True
            assert train.poll() is None, train.communicate()
            return False

        wait_until(reader_started, TIMEOUT_S, interval=0.2,
                   what="the reader never started")
        kill_tree(compute.pid)
        try:
            out, err = train.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("the training process still runs 90 s after its "
                        "compute job died")
    finally:
        kill_tree(train.pid)
        kill_tree(compute.pid)
    assert train.returncode != 0, out
    assert "cannot be reached" in err, err[-3000:]
    assert leftovers(config) == []


def _watchdog_threads():
    return [t for t in threading.enumerate()
            if t.name == "hbcore-data-service-watchdog" and t.is_alive()]


@pytest.mark.parametrize("who", ["training", "compute rank", "this process"])
def test_watchdog_tells_a_requested_stop_from_a_lost_job(monkeypatch, who):
    """A reader's watchdog stands down when the training job asked the
    compute job to stop (from another process: the service says so; from
    this one: shutdown() stops it first), so a reader that used
    send_to_data_service outside tf_data_service is not killed when the
    job it read from ends on request. A compute job that stops on its own
    (a signal to one of its ranks) still counts as lost: the watchdog ends
    the process once the service is gone."""
    from hbcore_tf.data.service import client as compute_service
    from hbcore_tf.data.service.rpc import (ComputeServiceClient,
                                            ComputeServiceServer, new_key)

    exits = []

    def fake_exit(code):
        # Called on the watchdog's thread: record, and end its loop.
        exits.append(code)
        compute_service._Watchdog.stop_watching()

    monkeypatch.setattr(compute_service, "WATCH_INTERVAL_S", 0.05)
    monkeypatch.setattr(os, "_exit", fake_exit)
    key = new_key()
    server = ComputeServiceServer(key)
    config = compute_service.TfDataServiceConfig(
        1, 1, "compute", [server.address], key)
    assert _watchdog_threads() == []
    compute_service._Watchdog.watch(config)
    try:
        assert len(_watchdog_threads()) == 1
        if who == "this process":
            config.compute_client().shutdown()
        else:
            other = ComputeServiceClient(server.address, key)
            assert other.call("ping") is True
            if who == "training":
                other.call("shutdown")
                assert other.call("ping") is False
            else:
                other.call("shutdown", False)
                assert other.call("ping") is True
            other.close()
        if who == "compute rank":
            server.close()
            wait_until(lambda: exits, 30.0, interval=0.02,
                       what="the watchdog did not end the process after "
                       "the compute job stopped on its own")
            assert exits == [1]
        else:
            wait_until(lambda: not _watchdog_threads(), 30.0, interval=0.02,
                       what="the watchdog still runs after a requested stop")
            server.close()
            assert exits == []
    finally:
        compute_service._Watchdog.stop_watching()
        server.close()
        wait_until(lambda: not _watchdog_threads(), 30.0, interval=0.02,
                   what="watchdog left running")


def test_training_side_dispatcher_stopped_when_workers_never_come():
    from hbcore_tf.data.service.rpc import ComputeServiceServer, new_key
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
        def port_closed():
            try:
                socket.create_connection(("127.0.0.1", port_of(address)),
                                         timeout=2).close()
            except OSError:
                return True
            return False

        wait_until(port_closed, 10, interval=0.1, what=(
            "the dispatcher at %s still runs after tf_data_service "
            "failed" % address))
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
