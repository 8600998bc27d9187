"""The TF_CONFIG launch (hbcore/launcher/tf_config_launch.py) across
emulated machines: every machine is a separate ``python -m hbcore.run``
(or ``hbrun --tf-config``) process group on 127.0.0.1 with its own
TF_CONFIG port, as a Kubernetes TFJob starts one per pod.

Jobs: 3 tasks (chief with 1 worker, worker:0 with 2 through
CUDA_VISIBLE_DEVICES=0,1, worker:1 with 1) running a short training whose
weights must equal both numpy's and the same script's under ``hbrun -np
4``, and what hb.context reports; 2 tasks of 2 workers each, one machine
started with hbrun --tf-config; a missing machine; a disagreeing
TF_CONFIG; a worker on a non-chief machine killed with SIGKILL; the
launcher of a non-chief machine killed with SIGKILL.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np

from support.harness import base_env, kill_tree, run_ranks, script_path
from support.procs import ENTRY, read_pids, wait_gone
from support.waiting import wait_until

SCRIPT = script_path("tf_config_job.py")
TIMEOUT_S = 120


def free_ports(count):
    """Ports nobody listens on now (each machine's TF_CONFIG port)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class Cluster:
    """Emulated machines of one TF_CONFIG cluster, each its own launcher.

    Args:
        workers: number of worker tasks (besides the chief).
    """

    def __init__(self, workers):
        ports = free_ports(workers + 1)
        self.cluster = {"chief": ["127.0.0.1:%d" % ports[0]]}
        if workers:
            self.cluster["worker"] = ["127.0.0.1:%d" % p for p in ports[1:]]
        self.out = tempfile.mkdtemp(prefix="hb_tfconfig_")
        self.procs = {}

    def start(self, task, devices=None, cluster=None, launcher=("run",),
              args=(), env=None, script_args=()):
        """Starts the launcher of ``task`` ("chief:0", "worker:1")."""
        kind, index = task.split(":")
        machine_env = base_env({"HB_TEST_OUT": self.out})
        machine_env.pop("CUDA_VISIBLE_DEVICES", None)
        machine_env.pop("NVIDIA_VISIBLE_DEVICES", None)
        if devices is not None:
            machine_env["CUDA_VISIBLE_DEVICES"] = devices
        else:
            # No GPU nodes here either way: one worker.
            machine_env["CUDA_VISIBLE_DEVICES"] = "-1"
        machine_env["TF_CONFIG"] = json.dumps({
            "cluster": cluster or self.cluster,
            "task": {"type": kind, "index": int(index)}})
        machine_env.update(env or {})
        command = [sys.executable, ENTRY] + list(launcher) + list(args) + [
            sys.executable, SCRIPT] + list(script_args)
        self.procs[task] = subprocess.Popen(
            command, env=machine_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True)

    def finish(self, timeout=TIMEOUT_S):
        """Waits for every launcher; returns {task: (code, stdout, stderr)}.
        On the hard timeout every machine's process tree is killed."""
        outcome = {}
        try:
            for task, proc in self.procs.items():
                out, err = proc.communicate(timeout=timeout)
                outcome[task] = (proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            for proc in self.procs.values():
                kill_tree(proc.pid)
            raise AssertionError("a machine's launcher timed out: %r"
                                 % outcome)
        return outcome

    def results(self):
        found = {}
        for name in os.listdir(self.out):
            if name.startswith("rank") and name.endswith(".json"):
                with open(os.path.join(self.out, name)) as f:
                    result = json.load(f)
                found[result["rank"]] = result
        return found

    def close(self):
        shutil.rmtree(self.out, ignore_errors=True)


def pid_files(directory):
    """The names of the pid files in ``directory`` (written or not)."""
    return [n for n in os.listdir(directory) if n.startswith("pid.")]


def assert_every_machine(outcome, code, *texts):
    """Every launcher exited with ``code`` and printed every text."""
    for task, (got, _out, err) in outcome.items():
        assert got == code and all(t in err for t in texts), (task, got, err)


def assert_ok(outcome):
    for task, (code, _out, err) in outcome.items():
        assert code == 0, "%s exited %s:\n%s" % (task, code, err)


def test_three_tasks_train_as_one_job_like_hbrun():
    cluster = Cluster(workers=2)
    try:
        # Started in reverse: the chief's launcher comes up last.
        cluster.start("worker:1", script_args=["--context"])
        cluster.start("worker:0", devices="0,1", script_args=["--context"])
        cluster.start("chief:0", script_args=["--context"])
        outcome = cluster.finish()
        assert_ok(outcome)
        results = cluster.results()
    finally:
        cluster.close()
    assert sorted(results) == [0, 1, 2, 3]
    # rank: (local rank, local size, devices, HybridBackend's task)
    layout = {0: (0, 1, "-1", ("chief", 0)), 1: (0, 2, "0", ("worker", 0)),
              2: (1, 2, "1", ("worker", 1)), 3: (0, 1, "-1", ("worker", 2))}
    for rank, (local, local_size, devices, task) in layout.items():
        result = results[rank]
        assert result["size"] == 4
        assert (result["local_rank"], result["local_size"]) == (local,
                                                                local_size)
        assert result["devices"] == devices
        assert result["task"] == {"type": task[0], "index": task[1]}
        assert result["context"] == [task[0], task[1], rank, 4, local]
        np.testing.assert_allclose(result["weights"], result["expected"],
                                   rtol=1e-12, atol=1e-12)
    # The same job launched by hbrun gets the same weights.
    run = run_ranks(SCRIPT, 4, timeout=TIMEOUT_S)
    run.assert_ok()
    for rank in range(4):
        np.testing.assert_allclose(results[rank]["weights"],
                                   run.results[rank]["weights"],
                                   rtol=1e-12, atol=1e-12)


def test_two_tasks_of_two_workers_one_started_by_hbrun():
    cluster = Cluster(workers=1)
    # An evaluator task takes no part: its launcher runs it alone.
    cluster.cluster["evaluator"] = ["127.0.0.1:%d" % free_ports(1)[0]]
    evaluator_out = tempfile.mkdtemp(prefix="hb_tfconfig_eval_")
    try:
        cluster.start("chief:0", devices="0,1",
                      launcher=("hbrun", "--tf-config"))
        cluster.start("evaluator:0", devices="0,1",
                      env={"HB_TEST_OUT": evaluator_out})
        cluster.start("worker:0", devices="0,1")
        outcome = cluster.finish()
        assert_ok(outcome)
        results = cluster.results()
        with open(os.path.join(evaluator_out, "rank0.json")) as f:
            evaluator = json.load(f)
    finally:
        cluster.close()
        shutil.rmtree(evaluator_out, ignore_errors=True)
    assert (evaluator["size"], evaluator["devices"], evaluator["task"]) == (
        1, "", {"type": "evaluator", "index": 0})
    assert [(r["rank"], r["size"], r["local_rank"], r["devices"],
             r["task"]["type"], r["task"]["index"])
            for _, r in sorted(results.items())] == [
        (0, 4, 0, "0", "chief", 0), (1, 4, 1, "1", "worker", 0),
        (2, 4, 0, "0", "worker", 1), (3, 4, 1, "1", "worker", 2)]
    for result in results.values():
        np.testing.assert_allclose(result["weights"], result["expected"],
                                   rtol=1e-12, atol=1e-12)


def test_a_missing_machine_ends_every_launcher_naming_it():
    cluster = Cluster(workers=2)
    try:
        cluster.start("chief:0", args=["--start-timeout", "3"])
        cluster.start("worker:1", args=["--start-timeout", "3"])
        outcome = cluster.finish()
    finally:
        cluster.close()
    missing = ("task worker:0 (%s) did not arrive within --start-timeout 3s "
               "(2 of 3 machines arrived)" % cluster.cluster["worker"][0])
    assert_every_machine(outcome, 1, "hbcore.run: error: " + missing)


def test_a_disagreeing_tf_config_is_named():
    cluster = Cluster(workers=2)
    other = {"chief": cluster.cluster["chief"],
             "worker": cluster.cluster["worker"][:1]}
    try:
        cluster.start("chief:0", args=["--start-timeout", "20"])
        cluster.start("worker:0", cluster=other,
                      args=["--start-timeout", "20"])
        outcome = cluster.finish()
    finally:
        cluster.close()
    differs = ("cluster['worker']: %s at the coordinator, %s at task "
               "worker:0" % (json.dumps(cluster.cluster["worker"]),
                             json.dumps(other["worker"])))
    assert_every_machine(outcome, 1, "describes another job than the "
                         "coordinator", differs)


def start_chief_and_worker(cluster, env):
    """chief:0 with one worker (rank 0), worker:0 with two (ranks 1, 2)."""
    cluster.start("chief:0", env=env)
    cluster.start("worker:0", devices="0,1", env=env)


def test_a_killed_worker_on_another_machine_stops_every_machine():
    cluster = Cluster(workers=1)
    try:
        start_chief_and_worker(cluster, {"HB_TEST_KILL_RANK": "2"})
        outcome = cluster.finish()
        pids = read_pids(cluster.out)
    finally:
        cluster.close()
    line = ("rank 2 (task worker:0 (%s), its worker 1) failed first: killed "
            "by signal SIGKILL (9)" % cluster.cluster["worker"][0])
    assert_every_machine(outcome, 128 + 9, line)
    assert len(pids) == 3
    assert wait_gone(pids) == []


def test_a_killed_launcher_of_another_machine_stops_the_job():
    cluster = Cluster(workers=1)
    try:
        start_chief_and_worker(cluster, {"HB_TEST_HOLD": "1"})
        # Every rank writes its pid after the first allreduce, so three
        # files mean the job runs on both machines.
        worker = cluster.procs["worker:0"]
        wait_until(lambda: len(pid_files(cluster.out)) >= 3, TIMEOUT_S,
                   interval=0.1, what="the job did not start")
        os.kill(worker.pid, 9)
        outcome = cluster.finish()
        pids = read_pids(cluster.out)
    finally:
        cluster.close()
    code, _out, err = outcome["chief:0"]
    assert code == 1 and ("hbcore.run: error: the launcher of task worker:0 "
                          "(%s) (127.0.0.1:" % cluster.cluster["worker"][0]
                          in err), err
    assert outcome["worker:0"][0] == -9
    assert wait_gone(pids) == []
