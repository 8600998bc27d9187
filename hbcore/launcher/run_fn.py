"""``hbcore.run(fn, np=...)``: run a Python function on N ranks.

Like ``horovod.run``: the function, its arguments and the caller's sys.path
are pickled (cloudpickle) into a temporary directory, ``np`` ranks are
launched through the same launcher as hbrun (rank wrapper, first-failure
teardown), each rank runs run_task.py, and the per-rank results are read
back in rank order.

Most imports (cloudpickle, psutil, subprocess, the launcher) happen inside
``run``: ``import hbcore`` imports this module, and should stay cheap.

The implementation lives here rather than in hbcore/run.py so that
``hbcore/__init__.py`` can import ``run`` without importing the module
``hbcore.run``; otherwise ``python -m hbcore.run`` finds that module already
imported and runpy prints a RuntimeWarning on every launch.
"""

import os
import pickle
import signal
import sys
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Union)

RUN_TASK = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "run_task.py")


def run(fn: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None, np: int = 1,
        hosts: Optional[str] = None, hostfile: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        mpi_args: Union[str, Sequence[str], None] = None,
        output_filename: Optional[str] = None, verbose: bool = False,
        executable: Optional[str] = None) -> List[Any]:
    """Runs ``fn(*args, **kwargs)`` on ``np`` ranks and returns the results.

    Each rank runs in its own process started by MPI's launcher, with its
    output printed rank-prefixed (``[1]<stdout>:...``) on this process's
    stdout/stderr.  ``fn`` must call ``hbcore.init()`` itself if it uses
    hbcore.  Functions defined in ``__main__`` or in a notebook are pickled
    by value; others are imported by the ranks from the caller's sys.path.

    Args:
        fn: The function to run on every rank.
        args: Positional arguments for ``fn``.
        kwargs: Keyword arguments for ``fn``.
        np: Number of ranks.
        hosts: Host list like ``"host1:2,host2:2"``; None for this host.
            Remote hosts must see the temporary directory (set TMPDIR to a
            shared file system).
        hostfile: File of ``host slots=N`` lines, instead of ``hosts``.
        env: Extra environment variables for every rank, on top of this
            process's environment.
        mpi_args: Extra mpiexec arguments (a string is shlex-split).
        output_filename: Also write each rank's output to
            ``output_filename/rank.N/{stdout,stderr}``.
        verbose: Print the mpiexec command line.
        executable: Python interpreter for the ranks (default:
            sys.executable).

    Returns:
        The return values of ``fn``, in rank order.

    Raises:
        ValueError: If ``np`` < 1, both ``hosts`` and ``hostfile`` are
            given, or a host list is malformed.
        RuntimeError: If a rank raised (the message names the rank and
            holds its traceback), was killed, or the launch failed.
        KeyboardInterrupt: If interrupted by Ctrl-C (all ranks are stopped
            first).
    """
    import shlex
    import shutil
    import subprocess
    import tempfile

    import cloudpickle

    from hbcore.launcher.errors import LauncherError
    from hbcore.launcher.hosts import parse_hostfile, parse_hosts
    from hbcore.launcher.run_task import FN_FILE
    from hbcore.launcher.supervisor import launch

    if not isinstance(np, int) or np < 1:
        raise ValueError("np must be an integer >= 1, got %r" % (np,))
    if hosts is not None and hostfile is not None:
        raise ValueError("give hosts or hostfile, not both")
    host_list = (parse_hosts(hosts) if hosts is not None else
                 parse_hostfile(hostfile) if hostfile is not None else None)
    if isinstance(mpi_args, str):
        mpi_args = shlex.split(mpi_args)

    workdir = tempfile.mkdtemp(prefix="hbcore-run-")
    try:
        with open(os.path.join(workdir, FN_FILE), "wb") as f:
            pickle.dump(list(sys.path), f)
            cloudpickle.dump((fn, tuple(args), dict(kwargs or {})), f)
        environ = dict(os.environ)
        environ.update(env or {})
        try:
            result = launch(
                [executable or sys.executable, RUN_TASK, workdir], np,
                hosts=host_list, mpi_args=list(mpi_args or ()),
                output_dir=(os.path.abspath(output_filename)
                            if output_filename else None),
                verbose=verbose, environ=environ, stdin=subprocess.DEVNULL)
        except LauncherError as exc:
            raise RuntimeError("hbcore.run: %s" % exc) from None
        if result.interrupted_by is not None:
            _reraise_signal(result.interrupted_by)
        return _collect(workdir, np, result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _reraise_signal(signum: int) -> None:
    # The ranks are stopped; now let the signal do to this process what it
    # would have done without us (the default SIGTERM kills it).
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.raise_signal(signum)
    raise RuntimeError("hbcore.run: interrupted by %s"
                       % signal.Signals(signum).name)


def _load(path: str) -> Optional[tuple]:
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


def _collect(workdir: str, np: int, result: Any) -> List[Any]:
    from hbcore.launcher.run_task import result_file

    outcomes: Dict[int, Optional[tuple]] = {
        rank: _load(result_file(workdir, rank)) for rank in range(np)}
    errors = {rank: o[1] for rank, o in outcomes.items()
              if o is not None and o[0] == "error"}
    if errors:
        first = result.first_failure
        rank = first.rank if first is not None and first.rank in errors \
            else min(errors)
        info = errors[rank]
        raise RuntimeError(
            "hbcore.run: rank %d raised %s: %s\n\nTraceback of rank %d:\n%s"
            % (rank, info["type"], info["message"], rank,
               info["traceback"].rstrip()))
    message = result.message("hbcore.run")
    if message:
        raise RuntimeError(message)
    missing = [rank for rank, o in outcomes.items() if o is None]
    if missing:
        raise RuntimeError("hbcore.run: ranks %s exited without a result"
                           % missing)
    return [outcomes[rank][1] for rank in range(np)]
