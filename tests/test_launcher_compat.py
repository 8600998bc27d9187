"""hbrun / hbcore.run against horovodrun 0.28.1's documented command line:
flag spellings, ssh and network-interface flags, horovodrun switches, and
launch-time errors that must name what was wrong."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "launcher_scripts"))
from support.hbcore_path import import_hbcore_package  # noqa: E402
from support.procs import Watchdog, hbrun  # noqa: E402
import run_fns  # noqa: E402

import_hbcore_package()
from hbcore.launcher import cli, hosts, mpiexec  # noqa: E402
from hbcore.launcher.job_spec import ElasticSettings  # noqa: E402
from hbcore.launcher.rank.rank_status import (  # noqa: E402
    STATUS_MARKER, parse_status)
from hbcore.launcher.run_fn import run  # noqa: E402

PY = sys.executable


def _parse_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


# ------------------------------------------------------------ spellings

def test_single_dash_hostfile_as_in_horovods_docs(tmp_path):
    """running.rst: ``horovodrun -np 6 -hostfile myhostfile python
    train.py``."""
    path = tmp_path / "myhostfile"
    path.write_text("aa slots=2\nbb slots=2\ncc slots=2\n")
    args, host_list = cli.parse_args(["-np", "6", "-hostfile", str(path),
                                      "python", "train.py"])
    assert host_list == [hosts.Host("aa", 2), hosts.Host("bb", 2),
                         hosts.Host("cc", 2)]
    assert args.np == 6 and args.command == ["python", "train.py"]


def test_short_check_build_flag():
    args, host_list = cli.parse_args(["-cb"])
    assert args.check_build and host_list is None


def test_horovodrun_switches_without_an_effect_here_are_accepted():
    """--disable-cache and --start-timeout steer horovodrun's ssh/NIC
    pre-checks, which hbrun does not run; --mpi names the only controller;
    --tcp changes nothing under MPICH in horovodrun either."""
    args, _ = cli.parse_args(["-np", "2", "--disable-cache", "--start-timeout",
                              "30", "--mpi", "--tcp", "python", "t.py"])
    assert args.command == ["python", "t.py"]
    assert cli.flags_to_env(args) == {}


def test_more_horovodrun_switches_without_an_effect_are_accepted():
    """--num-nccl-streams (hbcore runs one NCCL stream per device),
    --gloo-timeout-seconds (no Gloo controller) and --log-without-timestamp
    / --log-hide-timestamp (hbcore's log lines carry none)."""
    args, _ = cli.parse_args(["-np", "2", "--num-nccl-streams", "2",
                              "--gloo-timeout-seconds", "60",
                              "--log-without-timestamp",
                              "--log-hide-timestamp", "python", "t.py"])
    assert args.command == ["python", "t.py"]
    assert cli.flags_to_env(args) == {}


def test_version_flag(capsys):
    from hbcore import __version__
    for flag in ("-v", "--version"):
        with pytest.raises(SystemExit) as exc:
            cli.parse_args([flag])
        assert exc.value.code == 0
        assert capsys.readouterr().out == "hbrun (hbcore) %s\n" % __version__


def test_binding_args_come_before_mpi_args():
    args, _ = cli.parse_args(["-np", "2", "--binding-args=-bind-to core",
                              "--mpi-args=-launcher fork", "python", "t.py"])
    assert args.mpi_args == ["-bind-to", "core", "-launcher", "fork"]
    args, _ = cli.parse_args(["-np", "2", "python", "t.py"])
    assert args.mpi_args == []


def test_binding_args_bind_the_ranks():
    """--binding-args reaches mpiexec: bound to one core each (hydra's
    -bind-to core), every rank's affinity holds one CPU; without it, all."""
    code = "import os; print('cpus', len(os.sched_getaffinity(0)))"
    bound = hbrun("-np", "2", "--binding-args=-bind-to core", PY, "-c", code)
    assert bound.returncode == 0, bound.stderr
    assert bound.stdout.count("<stdout>:cpus 1\n") == 2, bound.stdout
    free = hbrun("-np", "2", PY, "-c", code)
    assert free.returncode == 0, free.stderr
    assert free.stdout.count("<stdout>:cpus %d\n"
                             % len(os.sched_getaffinity(0))) == 2, free.stdout


def test_prefix_output_with_timestamp():
    """horovodrun's format: the local time (time.asctime), then the rank
    prefix, on every line of every stream."""
    import re
    code = "import sys; print('out'); print('err', file=sys.stderr)"
    stamp = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
    for flag in ("-prefix-timestamp", "--prefix-output-with-timestamp"):
        proc = hbrun("-np", "2", flag, PY, "-c", code)
        assert proc.returncode == 0, proc.stderr
        for rank in (0, 1):
            assert re.search(r"(?m)^%s\[%d\]<stdout>:out$" % (stamp, rank),
                             proc.stdout), proc.stdout
            assert re.search(r"(?m)^%s\[%d\]<stderr>:err$" % (stamp, rank),
                             proc.stderr), proc.stderr
    plain = hbrun("-np", "1", PY, "-c", code)
    assert "[0]<stdout>:out\n" in plain.stdout.splitlines(True)


def test_autotune_flags_set_horovods_knobs():
    args, _ = cli.parse_args([
        "-np", "2", "--autotune", "--autotune-log-file", "tune.csv",
        "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "4",
        "--autotune-bayes-opt-max-samples", "6",
        "--autotune-gaussian-process-noise", "0.5", "python", "t.py"])
    assert cli.flags_to_env(args) == {
        "HB_AUTOTUNE": "1", "HB_AUTOTUNE_LOG": os.path.abspath("tune.csv"),
        "HB_AUTOTUNE_WARMUP_SAMPLES": "1", "HB_AUTOTUNE_STEPS_PER_SAMPLE": "4",
        "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "6",
        "HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.5"}


def test_negative_switches_set_their_knob():
    args, _ = cli.parse_args(["-np", "2", "--no-hierarchical-allreduce",
                              "--no-hierarchical-allgather", "--no-stall-check",
                              "python", "t.py"])
    assert cli.flags_to_env(args) == {"HB_HIERARCHICAL_ALLREDUCE": "0",
                                      "HB_HIERARCHICAL_ALLGATHER": "0",
                                      "HB_STALL_CHECK_DISABLE": "1"}


@pytest.mark.parametrize("argv, flag", [
    (["--hierarchical-allreduce", "--no-hierarchical-allreduce"],
     "--no-hierarchical-allreduce"),
    (["--start-timeout", "soon"], "--start-timeout"),
    (["-p", "ssh"], "-p/--ssh-port"),
    (["--gloo"], "--gloo"),
    (["--autotune-steps-per-sample", "0"], "--autotune-steps-per-sample"),
    (["--autotune-gaussian-process-noise", "loud"],
     "--autotune-gaussian-process-noise"),
    (["--config-file", "conf.yaml"], "--config-file"),
    (["--min-np", "3"], "--min-np"),  # more than -np
    (["--reset-limit", "1"], "--reset-limit"),  # not an elastic job
    (["--min-np", "1", "--host-discovery-script", "d.sh", "-H", "a:2"],
     "--host-discovery-script"),
    (["--min-np", "1", "--blacklist-cooldown-range", "5", "2"],
     "--blacklist-cooldown-range"),
    (["--log-with-timestamp"], "--log-with-timestamp"),
    (["--mpi-threads-disable"], "--mpi-threads-disable"),
    (["--binding-args", "-bind-to 'core"], "--binding-args"),
])
def test_bad_or_unsupported_horovodrun_flags_are_named(argv, flag, capsys):
    err = _parse_error(["-np", "2"] + argv + ["python", "t.py"], capsys)
    assert "hbrun: error: argument %s" % flag in err, err


# ------------------------------------------------------ ssh and NICs

def test_ssh_flags_become_launcher_extra_args():
    env = mpiexec.launcher_environ({"PATH": "/bin"}, ssh_port=2222,
                                   ssh_identity_file="/keys/id")
    assert env == {"PATH": "/bin",
                   "HYDRA_LAUNCHER_EXTRA_ARGS": "-p 2222 -i /keys/id",
                   "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS":
                       "-p 2222 -i /keys/id"}
    # The user's own extra arguments are kept.
    env = mpiexec.launcher_environ({"HYDRA_LAUNCHER_EXTRA_ARGS": "-q"},
                                   ssh_port=22)
    assert env["HYDRA_LAUNCHER_EXTRA_ARGS"] == "-q -p 22"
    assert mpiexec.launcher_environ({"A": "1"}) == {"A": "1"}


def test_ssh_port_and_identity_reach_ssh(tmp_path):
    """-p/--ssh-port and -i/--ssh-identity-file end up on ssh's command
    line (a stand-in ssh that records its arguments and runs the proxy
    here)."""
    log = tmp_path / "ssh.log"
    fake = tmp_path / "ssh"
    fake.write_text(
        "#!/bin/sh\n"
        "echo \"$@\" >> %s\n"
        "while [ $# -gt 0 ]; do case \"$1\" in\n"
        "  -p|-i) shift 2;; -*) shift;; *) break;; esac; done\n"
        "shift\n"
        "exec sh -c \"$*\"\n" % log)
    fake.chmod(0o755)
    proc = hbrun("-np", "2", "-H", "fakehostA:1,fakehostB:1", "-p", "2222",
                 "-i", str(tmp_path / "id_key"),
                 "--mpi-args=-launcher ssh -launcher-exec %s" % fake,
                 PY, "-c", "print('ran')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("<stdout>:ran\n") == 2, proc.stdout
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    for call in calls:
        assert "-p 2222 -i %s" % (tmp_path / "id_key") in call, call


def test_network_interfaces_reach_every_rank():
    proc = hbrun("-np", "2", "--network-interface", "lo",
                 "--network-interface", "eth9", PY, "-c",
                 "import os; print(os.environ['NCCL_SOCKET_IFNAME'])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("<stdout>:eth9,lo\n") == 2, proc.stdout
    args, _ = cli.parse_args(["-np", "1", "--network-interfaces", "eth0,ib0",
                              "python", "t.py"])
    assert cli.launch_env(args) == {"NCCL_SOCKET_IFNAME": "eth0,ib0"}


# ------------------------------------------------------ output files

def test_output_filename_that_is_a_file_is_named(tmp_path):
    target = tmp_path / "taken"
    target.write_text("")
    proc = hbrun("-np", "2", "--output-filename", str(target), PY, "-c",
                 "print(1)")
    assert proc.returncode != 0
    assert "--output-filename" in proc.stderr and str(target) in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_wrapper_reports_an_output_dir_it_cannot_write(tmp_path):
    """On another host hbrun cannot check the directory: the rank's wrapper
    reports it as the rank's failure, with a status line."""
    target = tmp_path / "taken"
    target.write_text("")
    env = dict(os.environ, PMI_RANK="0", PMI_SIZE="1")
    proc = subprocess.run([PY, mpiexec.RANK_WRAPPER, "--output-dir",
                           str(target), "--", PY, "-c", "print(1)"],
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines(keepends=True)
    status = [parse_status(l) for l in lines if l.startswith(STATUS_MARKER)]
    assert len(status) == 1 and status[0].exit_code == 1, proc.stderr
    assert b"Traceback" not in proc.stderr, proc.stderr
    assert b"cannot write" in proc.stderr and str(target).encode() in \
        proc.stderr


# ------------------------------------------------------ hbcore.run

def test_run_takes_horovods_num_proc_keyword():
    with Watchdog():
        results = run(run_fns.rank_and_args, num_proc=2)
    assert [r[0] for r in results] == ["0", "1"]


def test_run_network_interface_and_controller_arguments():
    with Watchdog():
        assert run(lambda: os.environ.get("NCCL_SOCKET_IFNAME"), np=1,
                   network_interface="lo", use_mpi=True, disable_cache=True,
                   start_timeout=30) == ["lo"]


def test_run_rejects_what_cannot_run():
    with pytest.raises(ValueError, match="4 ranks do not fit in the 2 slots"):
        run(run_fns.rank_and_args, np=4, hosts="a:1,b:1")
    with pytest.raises(ValueError, match="use_gloo"):
        run(run_fns.rank_and_args, np=1, use_gloo=True)
    with pytest.raises(ValueError, match="num_proc"):
        run(run_fns.rank_and_args, np=2, num_proc=3)


def test_a_tf_config_launch_is_not_elastic(capsys):
    err = _parse_error(["--tf-config", "--min-np", "1", "python", "t.py"],
                       capsys)
    assert ("hbrun: error: argument --tf-config: not allowed with --min-np, "
            "--max-np or --host-discovery-script") in err, err


def test_elastic_flags_give_the_driver_its_settings(monkeypatch):
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "42")
    args, hosts = cli.parse_args(
        ["-np", "2", "--min-np", "1", "--max-np", "3", "-H", "a:1,b:2",
         "--reset-limit", "0", "--blacklist-cooldown-range", "5", "60",
         "python", "t.py"])
    assert args.elastic == ElasticSettings(
        np=2, min_np=1, max_np=3, discovery_script=None, fixed_hosts=hosts,
        slots_per_host=1, timeout_s=42, reset_limit=0,
        cooldown_range=(5, 60))
    args, _ = cli.parse_args(["--min-np", "2", "--host-discovery-script",
                              "d.sh", "--slots-per-host", "4",
                              "--elastic-timeout", "7", "python", "t.py"])
    assert (args.np, args.elastic.slots_per_host, args.elastic.timeout_s,
            args.elastic.max_np) == (2, 4, 7, None)
    args, _ = cli.parse_args(["-np", "2", "python", "t.py"])
    assert args.elastic is None
