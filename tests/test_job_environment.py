"""Never train apart silently: hbcore.init() refuses a world of one rank
when TF_CONFIG, Slurm or another MPI launcher says the job has several
(hbcore/job_environment.py), and HB_IGNORE_TF_CONFIG switches that off.

The pure parts (TF_CONFIG parsing, the decision) are tested in this
process; the check itself in real processes: one plain ``python`` (MPI's
singleton start, as a TFJob pod running ``python train.py``) going
through many environments with init/shutdown, and one under
``hbrun -np 1`` (hydra's PMI_SIZE=1 is then the truth).
"""
import json
import os
import subprocess
import sys

import pytest

from support.harness import base_env, kill_tree
from support.hbcore_path import import_hbcore_package
from support.procs import SCRIPTS, hbrun

import_hbcore_package()
from hbcore import job_environment, tf_config  # noqa: E402

LONE_INIT = os.path.join(SCRIPTS, "lone_init.py")
TIMEOUT_S = 120


def tf_config_text(task="chief", index=0, workers=1, **extra):
    cluster = {"chief": ["m0:2222"]}
    if workers:
        cluster["worker"] = ["m%d:2222" % (i + 1) for i in range(workers)]
    cluster.update(extra)
    return json.dumps({"cluster": cluster,
                       "task": {"type": task, "index": index}})


# ------------------------------------------------------------ TF_CONFIG

def test_tf_config_order_and_fields():
    config = tf_config.parse(tf_config_text("worker", 1, workers=2,
                                            ps=["p0:1"],
                                            evaluator=["e0:1"]))
    assert [str(t) for t in config.training_tasks] == [
        "chief:0", "worker:0", "worker:1"]
    assert config.task == tf_config.Task("worker", 1) and config.trains
    assert config.address() == "m2:2222"
    assert tf_config.parse("") is None and tf_config.parse("{}") is None
    assert tf_config.split_address("[::1]:80") == ("::1", 80)


@pytest.mark.parametrize("text,message", [
    ("{nope", "not valid JSON"),
    ('{"cluster": {"chief": ["a:1"]}}', "needs a cluster and a task"),
    ('{"cluster": {"boss": ["a:1"]}, "task": {"type": "boss", "index": 0}}',
     "unknown task type 'boss'"),
    ('{"cluster": {"chief": ["a"]}, "task": {"type": "chief", "index": 0}}',
     "'a' is not a host:port"),
    ('{"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief"}}',
     "more than one chief"),
    ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
     "task worker:0 is not in its cluster"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
     '"index": true}}', "index must be an integer"),
])
def test_tf_config_errors(text, message):
    with pytest.raises(ValueError, match=message):
        tf_config.parse(text)


# --------------------------------------------------------- the decision

@pytest.mark.parametrize("env,expected", [
    ({}, None),
    ({"TF_CONFIG": tf_config_text(workers=0)}, None),
    ({"TF_CONFIG": tf_config_text("ps", 0, ps=["p:1"])}, None),
    ({"TF_CONFIG": tf_config_text("evaluator", 0, evaluator=["e:1"])}, None),
    ({"TF_CONFIG": tf_config_text("worker", 0)}, "TF_CONFIG names 2 training "
     "tasks (chief:0, worker:0; this is worker:0)"),
    ({"TF_CONFIG": "[1]"}, "TF_CONFIG is set but cannot be read"),
    ({"PMI_SIZE": "1", "SLURM_NTASKS": "4"}, None),
    ({"PMI_SIZE": "3"}, "started 3 processes (PMI_SIZE=3)"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "Open MPI's mpirun started this job "
     "with 2 tasks"),
    ({"MV2_COMM_WORLD_SIZE": "2"}, "MVAPICH's mpirun_rsh"),
    ({"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "8"}, None),
    ({"SLURM_NTASKS": "8"}, "Slurm started this job with 8 tasks"),
    ({"SLURM_NTASKS": "1"}, None),
])
def test_lone_process_problem(env, expected):
    problem = job_environment.lone_process_problem(env)
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and "HB_IGNORE_TF_CONFIG=1" in problem


# ------------------------------------------------------ real processes

def run_cases(cases, env, context=None):
    """Runs lone_init.py with the cases; returns {case: outcome}."""
    args = [sys.executable, LONE_INIT, json.dumps(cases)]
    if context:
        args += ["--context", context]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        raise AssertionError("lone_init.py timed out")
    assert proc.returncode == 0, err
    return {line["case"]: line for line in map(json.loads, out.splitlines())}


def clean_env():
    env = base_env()
    for name in ("TF_CONFIG", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS",
                 "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        env.pop(name, None)
    return env


def test_init_refuses_a_lone_process_of_a_larger_job():
    two = tf_config_text("worker", 0)
    results = run_cases([
        ["tf_config", {"TF_CONFIG": two}],
        ["ignored", {"TF_CONFIG": two, "HB_IGNORE_TF_CONFIG": "1"}],
        ["alias", {"TF_CONFIG": two, "HOROVOD_IGNORE_TF_CONFIG": "true"}],
        ["bad_switch", {"TF_CONFIG": two, "HB_IGNORE_TF_CONFIG": "maybe"}],
        ["single_task", {"TF_CONFIG": tf_config_text(workers=0)}],
        ["evaluator", {"TF_CONFIG": tf_config_text(
            "evaluator", 0, evaluator=["e:1"])}],
        ["slurm", {"SLURM_NTASKS": "4"}],
        ["open_mpi", {"OMPI_COMM_WORLD_SIZE": "2"}],
        ["again_ok", {}],
    ], clean_env(), context="tf_config")
    for case in ("tf_config", "context", "slurm", "open_mpi"):
        assert results[case]["error"] == "WorldMismatchError", results[case]
        assert results[case]["message"].startswith("hbcore.init(): ")
    assert "TF_CONFIG names 2 training tasks" in results["tf_config"][
        "message"]
    assert "python -m hbcore.run CMD" in results["context"]["message"]
    assert "SLURM_NTASKS=4" in results["slurm"]["message"]
    assert "OMPI_COMM_WORLD_SIZE=2" in results["open_mpi"]["message"]
    for case in ("ignored", "alias", "single_task", "evaluator", "again_ok"):
        assert results[case] == {"case": case, "size": 1}
    assert results["bad_switch"]["error"] == "ConfigError"
    assert "HB_IGNORE_TF_CONFIG: 'maybe'" in results["bad_switch"]["message"]


def test_init_under_hbrun_trusts_its_pmi_size():
    env = clean_env()
    env["SLURM_NTASKS"] = "4"  # an allocation around hbrun -np 1
    two = tf_config_text("chief", 0)
    proc = hbrun("-np", "1", sys.executable, LONE_INIT, json.dumps([
        ["slurm_outside", {}], ["tf_config", {"TF_CONFIG": two}]]),
        env=env, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    results = {}
    for line in proc.stdout.splitlines():
        line = json.loads(line.split(":", 1)[1])
        results[line["case"]] = line
    assert results["slurm_outside"] == {"case": "slurm_outside", "size": 1}
    assert results["tf_config"]["error"] == "WorldMismatchError"
    assert "TF_CONFIG names 2 training tasks" in results["tf_config"][
        "message"]


# ------------------------------------------- the launcher's decisions

def test_launchers_choose_the_tf_config_launch():
    import importlib

    from hbcore.launcher import cli

    # "hbcore.run" the attribute is the function; the module is the CLI.
    run_module = importlib.import_module("hbcore.run")

    parser = run_module.build_parser()
    args = parser.parse_args(["python", "t.py"])
    two = tf_config_text()
    assert cli.use_tf_config(parser, args, {"TF_CONFIG": two})
    assert not cli.use_tf_config(parser, args, {})
    assert not cli.use_tf_config(parser, args, {
        "TF_CONFIG": two, "HOROVOD_IGNORE_TF_CONFIG": "1"})
    args, hosts = cli.parse_args(["--tf-config", "--start-timeout", "5",
                                  "python", "t.py"])
    assert args.tf_config and args.start_timeout == 5 and hosts is None
    # hbrun without --tf-config ignores TF_CONFIG (-np decides).
    args, _ = cli.parse_args(["-np", "2", "python", "t.py"])
    assert not cli.use_tf_config(parser, args, {"TF_CONFIG": two})


@pytest.mark.parametrize("argv,message", [
    (["--tf-config", "-np", "2", "python", "t.py"],
     "argument --tf-config: not allowed with -np, -H or --hostfile"),
    (["--tf-config", "--start-timeout", "0", "python", "t.py"],
     "argument --start-timeout: expected an integer >= 1"),
])
def test_hbrun_tf_config_flag_errors(argv, message, capsys):
    from hbcore.launcher import cli

    with pytest.raises(SystemExit) as raised:
        cli.parse_args(argv)
    assert raised.value.code == 2 and message in capsys.readouterr().err


def test_env_flag_reads_the_knob_and_its_alias():
    from hbcore.knobs import env_flag

    assert env_flag("ignore_tf_config", {}) is False
    assert env_flag("ignore_tf_config", {"HB_IGNORE_TF_CONFIG": "true"})
    assert not env_flag("ignore_tf_config", {"HB_IGNORE_TF_CONFIG": "0",
                                             "HOROVOD_IGNORE_TF_CONFIG": "1"})
    with pytest.raises(ValueError, match="invalid value for "
                       "HOROVOD_IGNORE_TF_CONFIG: 'maybe'"):
        env_flag("ignore_tf_config", {"HOROVOD_IGNORE_TF_CONFIG": "maybe"})
