"""Tests of hbrun: flags, mpiexec command line, rank-prefixed output, and
first-failure teardown (2 and 3 ranks)."""
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from support.hbcore_path import ROOT, import_hbcore_package
from support.procs import SCRIPTS, hbrun, kill_tree, read_pids, wait_gone
from support.waiting import wait_until

import_hbcore_package()
from hbcore.launcher import cli, hosts, mpiexec  # noqa: E402
from hbcore.launcher.errors import LauncherError  # noqa: E402
from hbcore.launcher.rank.rank_status import (  # noqa: E402
    RankStatus, format_status, parse_status)

PY = sys.executable
PRINT_RANK = os.path.join(SCRIPTS, "print_rank.py")
FAIL_RANK = os.path.join(SCRIPTS, "fail_rank.py")


# ---------------------------------------------------------------- flags

def test_flags_map_onto_env():
    args, _ = cli.parse_args([
        "-np", "2", "--fusion-threshold-mb", "64", "--cycle-time-ms", "2.5",
        "--cache-capacity", "0", "--timeline-filename", "tl.json",
        "--stall-check-warning-time-seconds", "30",
        "--stall-check-shutdown-time-seconds", "120", "--log-level", "debug",
        "python", "train.py"])
    assert cli.flags_to_env(args) == {
        "HB_FUSION_THRESHOLD": str(64 * 1024 * 1024),
        "HB_CYCLE_TIME": "2.5",
        "HB_CACHE_CAPACITY": "0",
        "HB_TIMELINE": os.path.abspath("tl.json"),
        "HB_STALL_CHECK_TIME_SECONDS": "30",
        "HB_STALL_SHUTDOWN_TIME_SECONDS": "120",
        "HB_LOG_LEVEL": "DEBUG",
    }


def test_unset_flags_set_no_env():
    args, _ = cli.parse_args(["-np", "1", "python", "train.py"])
    assert cli.flags_to_env(args) == {}


def test_command_flags_pass_through():
    args, _ = cli.parse_args(["-np", "2", "--verbose", "python", "train.py",
                              "--lr", "1", "-np", "7", "--verbose"])
    assert args.np == 2 and args.verbose
    assert args.command == ["python", "train.py", "--lr", "1", "-np", "7",
                            "--verbose"]
    args, _ = cli.parse_args(["-np", "2", "--", "python", "-u", "t.py"])
    assert args.command == ["python", "-u", "t.py"]


def test_hosts_give_default_np_and_mpi_args_split():
    args, host_list = cli.parse_args(["-H", "a:2,b:3", "--mpi-args=-bind-to core",
                                      "python", "t.py"])
    assert args.np == 5
    assert host_list == [hosts.Host("a", 2), hosts.Host("b", 3)]
    assert args.mpi_args == ["-bind-to", "core"]


@pytest.mark.parametrize("argv, flag", [
    (["-np", "0", "python", "t.py"], "-np/--num-proc"),
    (["-np", "x", "python", "t.py"], "-np/--num-proc"),
    (["python", "t.py"], "-np/--num-proc"),
    (["-np", "2"], "no command"),
    (["-np", "2", "--cycle-time-ms", "-1", "python", "t.py"], "--cycle-time-ms"),
    (["-np", "2", "--cycle-time-ms", "0", "python", "t.py"], "--cycle-time-ms"),
    (["-np", "2", "--fusion-threshold-mb", "-3", "python", "t.py"],
     "--fusion-threshold-mb"),
    (["-np", "2", "--cache-capacity", "-1", "python", "t.py"], "--cache-capacity"),
    (["-np", "2", "--stall-check-warning-time-seconds", "-5", "python", "t.py"],
     "--stall-check-warning-time-seconds"),
    (["-np", "2", "--stall-check-warning-time-seconds", "60",
      "--stall-check-shutdown-time-seconds", "10", "python", "t.py"],
     "--stall-check-shutdown-time-seconds"),
    (["-np", "2", "--log-level", "LOUD", "python", "t.py"], "--log-level"),
    (["-np", "5", "-H", "a:2,b:2", "python", "t.py"], "-np/--num-proc"),
    (["-H", "a:zero", "python", "t.py"], "-H/--hosts"),
    (["-H", "a:2", "--hostfile", "f", "python", "t.py"], "--hostfile"),
    (["-np", "1", "--hostfile", "/nonexistent/hostfile", "python", "t.py"],
     "--hostfile"),
    (["-np", "1", "--mpi-args", "'unclosed", "python", "t.py"], "--mpi-args"),
])
def test_bad_flags_are_argparse_errors(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "hbrun: error:" in err and flag in err


def test_bad_flag_from_the_command_line_has_no_traceback():
    proc = hbrun("-np", "0", PY, "t.py")
    assert proc.returncode == 2
    assert "-np/--num-proc" in proc.stderr and "Traceback" not in proc.stderr


def test_help_documents_output_and_failures():
    proc = hbrun("--help")
    assert proc.returncode == 0
    assert "[1]<stdout>:" in proc.stdout and "failed first" in proc.stdout
    assert "HB_FUSION_THRESHOLD" in proc.stdout


def test_bin_hbrun_script():
    proc = subprocess.run([PY, os.path.join(ROOT, "bin", "hbrun"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "-np N" in proc.stdout


def test_launcher_works_where_the_core_cannot_load():
    """hbrun never loads the native core (or MPI): with an MPI library that
    cannot load, --help and a job that does not use hbcore still work."""
    env = dict(os.environ, HB_MPI_LIBRARY="/nonexistent/libmpi.so.12")
    proc = hbrun("--help", env=env)
    assert proc.returncode == 0, proc.stderr
    proc = hbrun("-np", "2", PY, PRINT_RANK, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "[1]<stdout>:" in proc.stdout, proc.stdout


def test_check_build_reports_launcher():
    proc = hbrun("--check-build")
    assert proc.returncode == 0, proc.stderr
    assert "MPI launcher:" in proc.stdout
    assert mpiexec.find_mpiexec() in proc.stdout
    assert "TensorFlow:" in proc.stdout and "NCCL" in proc.stdout


# TensorFlow's start-up log: absl/glog-prefixed lines ("I0000 00:00:...
# port.cc:153] oneDNN custom operations are on ...") and their companions.
_TF_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|oneDNN|cpu_feature_guard|"
                     r"absl::InitializeLog|To enable the following "
                     r"instructions|cuda drivers|cuDNN|cuFFT|cuBLAS|TF-TRT")


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="TensorFlow is not installed")
def test_check_build_output_has_no_tensorflow_log_lines():
    """The report is only its own lines, even with TF_CPP_MIN_LOG_LEVEL
    unset (TF 2.21 prints its oneDNN line regardless of it), and still
    says where the TF op library is (or that it is not built yet)."""
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = hbrun("--check-build", env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr
    noise = [line for line in (proc.stdout + proc.stderr).splitlines()
             if _TF_LOG.search(line)]
    assert noise == [], "TensorFlow log lines in the report:\n" + "\n".join(
        noise)
    assert proc.stderr == "", proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "hbcore build check", lines
    report = {}
    for line in lines[1:]:
        match = re.match(r"^  ([^:]+(?:\([^)]*\))?):\s+(\S.*)$", line)
        assert match, "not a report line: %r" % line
        report[match.group(1)] = match.group(2)
    tf_ops = report["TF op library"]
    assert tf_ops.endswith(".so") or tf_ops.startswith("not built yet"), \
        tf_ops
    assert report["TensorFlow"][0].isdigit(), report["TensorFlow"]


def test_check_build_compiles_nothing(tmp_path):
    """--check-build only looks for the TF op library: with an empty cache
    it reports 'not built yet' (or TF unavailable) and leaves it empty."""
    cache = tmp_path / "ops-cache"
    cache.mkdir()
    proc = hbrun("--check-build",
                 env=dict(os.environ, HB_TF_OPS_CACHE=str(cache)))
    assert proc.returncode == 0, proc.stderr
    line = [l for l in proc.stdout.splitlines() if "TF op library:" in l]
    assert len(line) == 1, proc.stdout
    assert "not built yet" in line[0] or "unavailable" in line[0], line
    assert "compiling" not in proc.stderr
    assert list(cache.iterdir()) == []


# ------------------------------------------------------ hosts and mpiexec

def test_parse_hosts_and_hostfile(tmp_path):
    assert hosts.parse_hosts("h1:2, h2") == [hosts.Host("h1", 2),
                                             hosts.Host("h2", 1)]
    path = tmp_path / "hostfile"
    path.write_text("# cluster\nh1 slots=4\nh2:2\n\nh3  # one slot\n")
    parsed = hosts.parse_hostfile(str(path))
    assert parsed == [hosts.Host("h1", 4), hosts.Host("h2", 2),
                      hosts.Host("h3", 1)]
    assert hosts.total_slots(parsed) == 7
    assert hosts.hydra_hosts_arg(parsed) == "h1:4,h2:2,h3:1"
    for bad in ("h1:0", "h1:-2", ",", "h 1:2"):
        with pytest.raises(ValueError):
            hosts.parse_hosts(bad)


def test_build_command_global_and_per_rank_env():
    cmd = mpiexec.build_command("/x/mpiexec", ["prog", "a"], 2,
                                hosts=[hosts.Host("h1", 2)],
                                env={"HB_B": "2", "HB_A": "1"},
                                mpi_args=["-bind-to", "core"])
    assert cmd == ["/x/mpiexec", "-hosts", "h1:2", "-genvall",
                   "-genv", "HB_A", "1", "-genv", "HB_B", "2",
                   "-bind-to", "core", "-n", "2", "prog", "a"]
    cmd = mpiexec.build_command("/x/mpiexec", ["prog"], 2, per_rank_env=[
        {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}])
    assert cmd == ["/x/mpiexec", "-genvall",
                   "-n", "1", "-env", "CUDA_VISIBLE_DEVICES", "0", "prog", ":",
                   "-n", "1", "-env", "CUDA_VISIBLE_DEVICES", "1", "prog"]
    with pytest.raises(ValueError):
        mpiexec.build_command("/x/mpiexec", ["prog"], 0)


def test_find_mpiexec(tmp_path):
    fake = tmp_path / "my-mpiexec"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert mpiexec.find_mpiexec({"HB_MPIEXEC": str(fake)}) == str(fake)
    with pytest.raises(LauncherError, match="HB_MPIEXEC"):
        mpiexec.find_mpiexec({"HB_MPIEXEC": str(tmp_path / "missing")})
    next_to_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(next_to_python, os.X_OK):
        assert mpiexec.find_mpiexec({"PATH": ""}) == next_to_python


def test_status_line_round_trip():
    killed = RankStatus(2, None, 9, "h", 42, 1.5)
    assert parse_status(format_status(killed)) == killed
    assert killed.describe() == "killed by signal SIGKILL (9)"
    assert killed.shell_code == 137
    exited = RankStatus(1, 3, None, "h", 43, 1.0)
    assert exited.describe() == "exited with code 3" and exited.shell_code == 3
    assert parse_status(b"[0]<stdout>:@@hbrun-rank-status@@ {}\n") is None
    hung = killed._replace(hung="it made no progress: stopped (state T)")
    assert parse_status(format_status(hung)) == hung
    assert hung.describe() == ("killed by signal SIGKILL (9) by hbrun: it "
                               "made no progress: stopped (state T)")
    # An elastic rank that left because ranks 1 and 2 stalled its world.
    left = RankStatus(0, 75, None, "h", 44, 2.0, stalled=[1, 2])
    assert parse_status(format_status(left)) == left


@pytest.mark.quiet  # times the settle wait: run alone
def test_settle_waits_for_every_rank_to_fail_then_stops():
    """After the first failure the teardown waits for the other ranks'
    failures (so each prints its own error), no longer than SETTLE_S."""
    import queue
    from hbcore.launcher import supervisor
    events = queue.Queue()
    status = RankStatus(1, 1, None, "h", 7, 0.5)
    for _ in range(2):
        events.put(("status", status))
    events.put(("exit", 0))  # must not be taken: 3 ranks failed by then
    start = time.monotonic()
    supervisor._settle(events, 3)
    assert time.monotonic() - start < supervisor.SETTLE_S / 2
    assert events.get_nowait() == ("exit", 0)

    # mpiexec ending also ends the wait; a lone rank that never fails is
    # waited for SETTLE_S at most.
    events.put(("exit", 0))
    start = time.monotonic()
    supervisor._settle(events, 3)
    assert time.monotonic() - start < supervisor.SETTLE_S / 2
    start = time.monotonic()
    supervisor._settle(events, 2)
    waited = time.monotonic() - start
    assert supervisor.SETTLE_S - 0.05 <= waited < supervisor.SETTLE_S + 2.0
    assert events.empty()


# -------------------------------------------------------------- launches

@pytest.mark.parametrize("np", [2, 3])
def test_every_rank_prints_with_its_prefix(np):
    proc = hbrun("-np", str(np), PY, PRINT_RANK, "--lr", "1")
    assert proc.returncode == 0, proc.stderr
    for rank in range(np):
        assert ("[%d]<stdout>:rank %d of %d args --lr 1\n" % (rank, rank, np)
                in proc.stdout)
        assert "[%d]<stderr>:to stderr from %d\n" % (rank, rank) in proc.stderr
    assert "@@hbrun" not in proc.stdout + proc.stderr


def test_hb_flags_reach_every_rank():
    proc = hbrun("-np", "2", "--cycle-time-ms", "3", "--log-level", "info",
                 PY, "-c", "import os; print(os.environ['HB_CYCLE_TIME'], "
                 "os.environ['HB_LOG_LEVEL'], os.environ['PATH'] != '')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("<stdout>:3 INFO True\n") == 2


def test_output_filename_writes_per_rank_files(tmp_path):
    out = tmp_path / "logs"
    proc = hbrun("-np", "2", "--output-filename", str(out), PY, PRINT_RANK)
    assert proc.returncode == 0, proc.stderr
    for rank in range(2):
        stdout = (out / ("rank.%d" % rank) / "stdout").read_text()
        assert stdout == "rank %d of 2 args \n" % rank
        assert (out / ("rank.%d" % rank) / "stderr").read_text() == \
            "to stderr from %d\n" % rank
    assert "[1]<stdout>:rank 1" in proc.stdout  # still on the console too


def test_lines_split_on_newline_only_and_last_line_is_kept():
    proc = hbrun("-np", "2", PY, "-c",
                 "import sys; sys.stdout.write('a\\nb\\rc')", text=False)
    assert proc.returncode == 0, proc.stderr
    for rank in range(2):
        assert b"[%d]<stdout>:a\n" % rank in proc.stdout
        # "\r" (progress bars) stays inside the line; the unterminated last
        # line gets its newline.
        assert b"[%d]<stdout>:b\rc\n" % rank in proc.stdout


def _need_mpi4py():
    # mpi4py is a dependency of hbcore (pyproject.toml): missing, it fails.
    probe = subprocess.run([PY, "-c", "import mpi4py"], capture_output=True,
                           text=True, timeout=60)
    assert probe.returncode == 0, "mpi4py does not import:\n" + probe.stderr


def test_mpi_works_through_the_rank_wrapper():
    _need_mpi4py()
    proc = hbrun("-np", "3", PY, os.path.join(SCRIPTS, "mpi_allreduce.py"))
    assert proc.returncode == 0, proc.stderr
    for rank in range(3):
        assert "[%d]<stdout>:rank %d sum 3\n" % (rank, rank) in proc.stdout


def test_missing_command_fails_with_127():
    proc = hbrun("-np", "2", "no-such-command-hbcore")
    assert proc.returncode == 127
    assert "cannot run 'no-such-command-hbcore'" in proc.stderr
    assert "failed first: exited with code 127" in proc.stderr


def _check_first_failure(tmp_path, np, failing, mode, code, how):
    pid_dir = str(tmp_path)
    start = time.monotonic()
    proc = hbrun("-np", str(np), PY, FAIL_RANK, pid_dir, str(failing), mode)
    elapsed = time.monotonic() - start
    assert elapsed < 10, "hbrun took %.1f s" % elapsed
    assert proc.returncode == code, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.startswith("hbrun:")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("hbrun: rank %d failed first: %s" % (failing, how))
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr
    pids = read_pids(pid_dir)
    assert len(pids) == np
    assert wait_gone(pids) == []


def test_rank_exit_code_stops_sleeping_ranks(tmp_path):
    _check_first_failure(tmp_path, 2, 1, "exit3", 3, "exited with code 3")


def test_rank_killed_by_sigkill_stops_the_others(tmp_path):
    _check_first_failure(tmp_path, 3, 2, "sigkill", 137,
                         "killed by signal SIGKILL (9)")


def test_rank_exit_stops_ranks_waiting_in_mpi_barrier(tmp_path):
    _need_mpi4py()
    _check_first_failure(tmp_path, 3, 1, "mpi-exit1", 1, "exited with code 1")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_hbrun_stops_all_ranks(tmp_path, signum):
    # No rank fails (failing rank 99); hbrun gets the signal once all run.
    from support.procs import ENTRY
    proc = subprocess.Popen([PY, ENTRY, "hbrun", "-np", "2", PY, FAIL_RANK,
                             str(tmp_path), "99", "exit3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        def both_ranks_run():
            if len(read_pids(str(tmp_path))) >= 2:
                return True
            assert proc.poll() is None, "hbrun exited before both ranks ran"
            return False

        wait_until(both_ranks_run, 30, interval=0.05,
                   what="both ranks wrote their pid files")
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        kill_tree(proc.pid)
    assert proc.returncode == 128 + signum
    assert "received %s; stopped all ranks" % signal.Signals(signum).name in err
    assert wait_gone(read_pids(str(tmp_path))) == []
