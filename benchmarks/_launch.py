"""What the benchmark drivers share: the environment of a worker job and
running worker processes under a hard timeout.

A driver (``python benchmarks/X.py``) starts its own workers (hbrun jobs,
or plain processes for MultiWorkerMirroredStrategy); every worker gets the
same environment: hbcore from the checkout when it is built in place
(``python setup.py build_ext --inplace``), else the installed hbcore (the
README's ``pip install .``); no inherited HB_* / HOROVOD_* / TF_CONFIG
settings, quiet TensorFlow, one OpenMP thread.
"""
import glob
import importlib.machinery
import json
import os
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The working directory of every worker: not the checkout, whose unbuilt
# ``hbcore/`` would shadow the installed package for ``python -m`` and
# for any empty PYTHONPATH entry.
WORKER_CWD = HERE


_dropped_named = False  # whether worker_env said what it does not pass on


def _not_checkout(entry: str) -> bool:
    return os.path.abspath(entry or os.curdir) != ROOT


def hbcore_paths() -> List[str]:
    """The sys.path entries that make ``import hbcore`` find a built hbcore.

    The checkout when it holds an in-place build. Otherwise nothing: the
    installed package (the README's ``pip install .``) serves, and the
    checkout is taken off this process's sys.path, since its unbuilt
    ``hbcore/`` (put there by ``PYTHONPATH=.`` or by running from the
    checkout) would shadow the installed one and fail to import its
    native module.

    Returns:
        ``[ROOT]`` or ``[]``.

    Raises:
        SystemExit: hbcore is neither built in place nor installed.
    """
    if glob.glob(os.path.join(ROOT, "hbcore", "_core*.so")):
        return [ROOT]
    sys.path[:] = [p for p in sys.path if _not_checkout(p)]
    if importlib.machinery.PathFinder.find_spec("hbcore", sys.path) is None:
        raise SystemExit(
            "benchmarks: no built hbcore found. Install it (pip install . "
            "from the checkout, as the README says) or build the checkout "
            "in place (python setup.py build_ext --inplace).")
    return []


def worker_env(extra: Optional[Dict[str, str]] = None,
               paths: Sequence[str] = ()) -> Dict[str, str]:
    """Returns the environment of one worker process.

    Args:
        extra: variables set on top (e.g. HB_TIMELINE, TF_CONFIG); not
            PYTHONPATH, which ``paths`` extends.
        paths: directories to put first on the workers' PYTHONPATH (e.g.
            benchmarks/ for a driver whose workers import its modules).

    Returns:
        The environment. Its PYTHONPATH has no empty entry (Python would
        read one as the working directory).

    Raises:
        ValueError: ``extra`` sets PYTHONPATH.
    """
    if extra and "PYTHONPATH" in extra:
        raise ValueError("worker_env: pass PYTHONPATH entries as paths=, "
                         "not in extra")
    global _dropped_named
    dropped = sorted(k for k in os.environ
                     if k.startswith(("HB_", "HOROVOD_", "TF_CONFIG")))
    if dropped and not _dropped_named:
        # Said once: a knob set for an experiment would otherwise be
        # ignored without a word.
        _dropped_named = True
        print("benchmark workers run with the default settings; not passed "
              "on: %s" % ", ".join(dropped), file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                 if p and _not_checkout(p)]
    entries = [p for p in list(paths) + hbcore_paths() + inherited if p]
    env.update({"PYTHONPATH": os.pathsep.join(entries),
                "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def hbrun(np_: int, argv: Sequence[str],
          hbrun_args: Sequence[str] = ()) -> List[str]:
    """The command line of an hbrun job of ``np_`` ranks running ``argv``
    with this interpreter."""
    return ([sys.executable, "-m", "hbcore.launcher.cli", "-np", str(np_)] +
            list(hbrun_args) + [sys.executable] + list(argv))


def run(commands: Sequence[Sequence[str]], envs: Sequence[Dict[str, str]],
        timeout: float, what: str) -> List[str]:
    """Runs processes side by side and returns their combined outputs.

    Each process gets its own session, so a timeout kills every process
    it started.

    Raises:
        SystemExit: a process failed (its output's tail is in the message)
            or they did not all finish within ``timeout`` seconds.
    """
    procs = [subprocess.Popen(list(c), env=e, cwd=WORKER_CWD,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              errors="replace", start_new_session=True)
             for c, e in zip(commands, envs)]
    deadline = time.monotonic() + timeout
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(
                timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                try:
                    os.killpg(p.pid, 9)
                except OSError:
                    pass
            raise SystemExit("%s timed out after %ss" % (what, timeout))
        outputs.append(out)
        if proc.returncode != 0:
            raise SystemExit("%s failed (exit %s):\n%s" % (
                what, proc.returncode, out[-4000:]))
    return outputs


def free_ports(n: int) -> List[int]:
    """``n`` TCP ports on localhost that were free a moment ago."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def print_and_save(lines: Sequence[str], results: object,
                   path: Optional[str]) -> None:
    """Prints the table; with ``path`` (--json) also writes the numbers."""
    print("\n".join(lines))
    if path:
        with open(path, "w") as f:
            json.dump({"results": results, "table": list(lines)}, f, indent=1)
