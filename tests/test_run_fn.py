"""Tests of hbcore.run(fn, np=...) and ``python -m hbcore.run``."""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "launcher_scripts"))
from support.hbcore_path import ROOT, import_hbcore_package  # noqa: E402
from support.procs import SCRIPTS, Watchdog, run_entry  # noqa: E402
import run_fns  # noqa: E402

import_hbcore_package()
from hbcore.launcher.devices import worker_devices  # noqa: E402
from hbcore.launcher.run_fn import run  # noqa: E402

SHOW_DEVICE = os.path.join(SCRIPTS, "show_device.py")


@pytest.mark.parametrize("np", [2, 3])
def test_run_returns_results_in_rank_order(np):
    with Watchdog():
        results = run(run_fns.rank_and_args, args=(1, "a"), kwargs={"k": 2},
                      np=np)
    assert results == [(str(rank), (1, "a"), {"k": 2}) for rank in range(np)]


def test_run_is_callable_after_import_of_its_module():
    """``import hbcore.run`` (the module of ``python -m hbcore.run``) sets
    the package attribute to the module; it still runs functions."""
    import hbcore
    import hbcore.run  # noqa: F401
    with Watchdog():
        results = hbcore.run(run_fns.rank_and_args, args=(3,), np=2)
    assert results == [(str(rank), (3,), {}) for rank in range(2)]


def test_run_pickles_local_closures_by_value():
    offset = 10

    def add_rank():
        return int(os.environ["PMI_RANK"]) + offset

    with Watchdog():
        assert run(add_rank, np=2) == [10, 11]


def test_run_passes_env():
    with Watchdog():
        # A lambda, not os.environ.get: that bound method would carry a
        # pickled copy of this process's environment.
        assert run(lambda name: os.environ.get(name), args=("HB_TEST_FLAG",),
                   np=2, env={"HB_TEST_FLAG": "yes"}) == ["yes", "yes"]


def test_raising_fn_names_the_rank_and_its_traceback():
    start = time.monotonic()
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            run(run_fns.fail_on_rank, args=(1,), np=3)
    assert time.monotonic() - start < 10
    message = str(exc.value)
    assert "rank 1 raised ValueError: bad things on rank 1" in message
    assert "Traceback" in message and "run_fns.py" in message
    assert "fail_on_rank" in message


def test_root_failure_is_reported_not_a_peers_shutdown_error():
    """Rank 0's ShutdownError (a consequence of rank 1's exit) reaches the
    launcher first; the error reported is rank 1's own."""
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            run(run_fns.raise_while_peer_waits, args=(1,), np=2)
    first_line = str(exc.value).splitlines()[0]
    assert first_line == ("hbcore.run: rank 1 raised ValueError: root cause "
                          "on rank 1"), str(exc.value)
    assert "raise_while_peer_waits" in str(exc.value)


def test_killed_rank_is_reported():
    with Watchdog():
        with pytest.raises(RuntimeError,
                           match=r"rank 1 failed first: killed by signal "
                                 r"SIGKILL \(9\)"):
            run(run_fns.kill_self_on_rank, args=(1,), np=2)


def test_a_killed_rank_is_the_cause_not_a_peers_later_error(tmp_path):
    """Rank 1 is killed, rank 0 raises because it is gone: the error is
    rank 1's death (outcome.collect, as hbcore.spark.run reports it), not
    rank 0's consequence."""
    with Watchdog():
        with pytest.raises(RuntimeError) as exc:
            run(run_fns.raise_after_peer_is_killed, args=(1, str(tmp_path)),
                np=2)
    assert str(exc.value).startswith(
        "hbcore.run: rank 1 failed first: killed by signal SIGKILL (9)"), \
        str(exc.value)


def test_bad_arguments():
    with pytest.raises(ValueError):
        run(run_fns.rank_and_args, np=0)
    with pytest.raises(ValueError):
        run(run_fns.rank_and_args, np=1, hosts="a:1", hostfile="f")


# ------------------------------------------------- python -m hbcore.run

def _env(**changes):
    env = dict(os.environ)
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    env.update(changes)
    return env


def test_module_starts_one_worker_per_visible_device():
    proc = run_entry(["run", sys.executable, SHOW_DEVICE],
                     env=_env(CUDA_VISIBLE_DEVICES="0,1"))
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == ["[0]<stdout>:worker 0 of 2 device 0",
                     "[1]<stdout>:worker 1 of 2 device 1"]


def test_module_starts_one_worker_without_devices():
    proc = run_entry(["run", sys.executable, SHOW_DEVICE], env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "[0]<stdout>:worker 0 of 1 device <unset>"]


def test_python_dash_m_hbcore_run():
    env = _env(CUDA_VISIBLE_DEVICES="3,5", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", "hbcore.run", sys.executable,
                           SHOW_DEVICE], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == [
        "[0]<stdout>:worker 0 of 2 device 3",
        "[1]<stdout>:worker 1 of 2 device 5"]
    # runpy warns when ``import hbcore`` already imported hbcore.run (the
    # package must take run from hbcore.launcher.run_fn).
    assert "RuntimeWarning" not in proc.stderr, proc.stderr


def test_worker_devices(tmp_path):
    no_gpus = str(tmp_path / "none" / "nvidia[0-9]*")
    assert worker_devices({}, dev_glob=no_gpus) is None
    assert worker_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert worker_devices({"CUDA_VISIBLE_DEVICES": ""}) is None
    assert worker_devices({"CUDA_VISIBLE_DEVICES": "-1"}) is None
    # Inside an NVIDIA container the listed GPUs are renumbered from 0.
    assert worker_devices({"NVIDIA_VISIBLE_DEVICES": "4,6"}) == ["0", "1"]
    assert worker_devices({"NVIDIA_VISIBLE_DEVICES": "void"}) is None
    assert worker_devices({"CUDA_VISIBLE_DEVICES": "1",
                           "NVIDIA_VISIBLE_DEVICES": "all"}) == ["1"]
    for index in range(3):
        (tmp_path / ("nvidia%d" % index)).write_text("")
    (tmp_path / "nvidiactl").write_text("")
    assert worker_devices({"NVIDIA_VISIBLE_DEVICES": "all"},
                          dev_glob=str(tmp_path / "nvidia[0-9]*")) == [
        "0", "1", "2"]
    # No variable: every GPU of the machine, one worker each.
    assert worker_devices({}, dev_glob=str(tmp_path / "nvidia[0-9]*")) == [
        "0", "1", "2"]
