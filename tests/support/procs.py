"""Process helpers for the launcher tests (tests/launcher_scripts): hard
timeouts, leftover checks."""
import os
import signal
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import psutil

from support.harness import TESTS_DIR, kill_tree
from support.waiting import poll_until

SCRIPTS = os.path.join(TESTS_DIR, "launcher_scripts")
ENTRY = os.path.join(SCRIPTS, "entry.py")
LAUNCH_TIMEOUT_S = 60


def run_entry(args: Sequence[str], env: Optional[Dict[str, str]] = None,
              timeout: float = LAUNCH_TIMEOUT_S,
              text: bool = True) -> subprocess.CompletedProcess:
    """Runs ``entry.py ARGS`` (hbrun or python -m hbcore.run) with a hard
    timeout; on timeout the whole process tree is killed and AssertionError
    raised.  ``text=False`` returns bytes (no newline translation)."""
    proc = subprocess.Popen([sys.executable, ENTRY] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=text, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        raise AssertionError("timed out after %ss\nstdout:\n%s\nstderr:\n%s"
                             % (timeout, out, err))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def hbrun(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """Runs hbrun with ARGS (see run_entry)."""
    return run_entry(("hbrun",) + args, **kwargs)


def read_pids(pid_dir: str) -> List[int]:
    """Returns the pids the fail_rank.py ranks wrote."""
    return [int(open(os.path.join(pid_dir, name)).read())
            for name in sorted(os.listdir(pid_dir)) if name.startswith("pid.")]


def gone(pid: int) -> bool:
    """True if no live process has this pid (a zombie waiting for a reaper
    that is not ours counts as gone: it runs no code)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: Sequence[int], timeout: float = 5.0) -> List[int]:
    """Waits until all pids are gone; returns those still alive."""
    alive: List[int] = []

    def all_gone() -> bool:
        alive[:] = [pid for pid in pids if not gone(pid)]
        return not alive

    poll_until(all_gone, timeout, interval=0.05)
    return alive


def hosted_processes() -> List[Tuple[int, List[str]]]:
    """Processes of hosted ranks (hbcore.spark, hbcore.ray) still alive on
    this machine: proxies and ranks carry their host's key in the
    environment.

    Returns:
        (pid, command line) of each.
    """
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "HB_RANK_HOST_KEY" in proc.environ():
                found.append((proc.pid, proc.info["cmdline"]))
        except psutil.Error:
            pass
    return found


class Watchdog:
    """Hard timeout for in-process launches (hbcore.run): after ``timeout``
    seconds every descendant of this process is killed, which ends the
    launch, and ``fired`` is set."""

    def __init__(self, timeout: float = LAUNCH_TIMEOUT_S) -> None:
        self.fired = False
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        for child in psutil.Process().children(recursive=True):
            try:
                child.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass

    def __enter__(self) -> "Watchdog":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        assert not self.fired, "launch timed out; its processes were killed"
