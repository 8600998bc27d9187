"""Helpers of the tf.data service suites (tests/tf/test_data_service*.py):
start a compute job, wait for its config file, end it and look for
leftovers.
"""
import os
import subprocess
import sys
import threading

import psutil
import pytest

from support.harness import base_env, kill_tree  # noqa: F401  (re-exported)
from support.tf_launch import _pythonpath, launch
from support.waiting import wait_until

TIMEOUT_S = 180


def start_compute_job(config, np_=2, args=()):
    """hbrun -np NP python -m hbcore_tf.data.compute_worker ARGS CONFIG, run
    from CONFIG's directory (never from the checkout, whose unbuilt
    packages would shadow the installed ones under ``python -m``)."""
    command = [sys.executable, "-m", "hbcore.launcher.cli", "-np", str(np_),
               sys.executable, "-m", "hbcore_tf.data.compute_worker"]
    command += list(args) + [str(config)]
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "2"})
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace",
                            start_new_session=True,
                            cwd=os.path.dirname(str(config)))


def run_check(tmp_path, mode, n, compute_args=(), start=start_compute_job):
    """A compute job (2 ranks, COMPUTE_ARGS, started by START(config,
    args=...)) and data_service_check.py MODE N at 2 ranks; checks that the
    compute job exited 0, left nothing behind and ran the map function
    (not the trainers). Returns rank 0's report."""
    config = tmp_path / "compute.json"
    compute = start(config, args=list(compute_args))
    try:
        run = launch("data_service_check.py", 2, timeout=TIMEOUT_S,
                     args=[str(config), mode, str(n)], cache=False)
        run.assert_ok()
        code, _, err = finish(compute)
    finally:
        kill_tree(compute.pid)
    assert code == 0, err[-3000:]
    result = run.results[0]
    assert result["map_pids"], result
    assert not set(result["map_pids"]) & set(result["trainer_pids"]), result
    assert leftovers(config) == []
    return result


def wait_for_config(config, compute):
    """Waits (polling, up to TIMEOUT_S) until the compute job wrote its
    config file; fails with the job's output if it exited first."""
    def written() -> bool:
        if config.exists():
            return True
        assert compute.poll() is None, compute.communicate()
        return False

    wait_until(written, TIMEOUT_S, interval=0.2, what="no config file")


def launch_env():
    """The environment of a training launch: rank scripts importable."""
    return base_env({"TF_CPP_MIN_LOG_LEVEL": "2",
                     "PYTHONPATH": os.pathsep.join(_pythonpath())})


def finish(proc, timeout=TIMEOUT_S):
    """(returncode, stdout, stderr); kills the tree on timeout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        pytest.fail("compute job did not stop\n%s\n%s" % (out[-2000:],
                                                          err[-2000:]))
    return proc.returncode, out, err


def leftovers(config):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if str(config) in " ".join(proc.info["cmdline"] or []):
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


def run_code(code, cwd, timeout=120):
    env = base_env({"TF_CPP_MIN_LOG_LEVEL": "3"})
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(cwd),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def call_in_thread(fn, timeout=20.0):
    """fn()'s result, or pytest.fail when it does not return in time (the
    call would otherwise hang the test)."""
    result, error = [], []

    def body():
        try:
            result.append(fn())
        except BaseException as exc:  # pylint: disable=broad-except
            error.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail("the call did not return within %ss" % timeout)
    if error:
        raise error[0]
    return result[0]


def port_of(address):
    """The port of a "host:port" address."""
    return int(address.rsplit(":", 1)[1])
