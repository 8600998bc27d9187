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
import sys
from typing import (Any, Callable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from hbcore.launcher.rank import RUN_TASK


def run(fn: Callable[..., Any], args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None, np: Optional[int] = None,
        hosts: Optional[str] = None, hostfile: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        mpi_args: Union[str, Sequence[str], None] = None,
        output_filename: Optional[str] = None, verbose: bool = False,
        executable: Optional[str] = None, *,
        num_proc: Optional[int] = None,
        ssh_port: Optional[int] = None,
        ssh_identity_file: Optional[str] = None,
        network_interface: Union[str, Sequence[str], None] = None,
        start_timeout: Optional[int] = None,
        disable_cache: Optional[bool] = None,
        use_gloo: Optional[bool] = None,
        use_mpi: Optional[bool] = None,
        min_np: Optional[int] = None,
        max_np: Optional[int] = None,
        min_num_proc: Optional[int] = None,
        max_num_proc: Optional[int] = None,
        slots: Optional[int] = None,
        reset_limit: Optional[int] = None,
        cooldown_range: Optional[Tuple[float, float]] = None,
        host_discovery_script: Optional[str] = None) -> List[Any]:
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
        np: Number of ranks (default: ``min_np``, else 1).
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
        num_proc: ``horovod.run``'s name for ``np``.
        ssh_port: ssh port on all hosts (``ssh -p``), as horovod.run.
        ssh_identity_file: ssh private key file (``ssh -i``).
        network_interface: Interfaces for NCCL's sockets, a list or a
            comma-separated string (sets NCCL_SOCKET_IFNAME).
        start_timeout: Accepted for horovod.run compatibility; there are no
            pre-launch checks to time out.
        disable_cache: Accepted for horovod.run compatibility (no cache).
        use_gloo: Must not be true: hbcore has no Gloo controller.
        use_mpi: Accepted; MPI is the only controller.
        min_np: Elastic: fewest ranks to go on with (hbrun's ``--min-np``;
            docs/elastic.md).  Any of min_np, max_np and
            host_discovery_script makes the job elastic: ``fn`` then uses
            ``hvd.elastic.run`` and state objects.  A rank stopped or
            stuck in the kernel for HB_STALL_SHUTDOWN_TIME_SECONDS (in
            ``env`` or this process's environment), else for
            HOROVOD_ELASTIC_TIMEOUT (600 s), is killed and its host left
            out (docs/elastic.md, "Hung ranks").
        max_np: Elastic: most ranks (``--max-np``).
        min_num_proc: horovod.run's name for ``min_np``.
        max_num_proc: horovod.run's name for ``max_np``.
        slots: Elastic: slots of a discovered host printed without any
            (``--slots-per-host``).
        reset_limit: Elastic: most re-formations (``--reset-limit``).
        cooldown_range: Elastic: ``(MIN, MAX)`` seconds a failed host is
            blacklisted (``--blacklist-cooldown-range``).
        host_discovery_script: Elastic: prints the usable hosts
            (``--host-discovery-script``; not with ``hosts``).

    Returns:
        The return values of ``fn``, in rank order; for an elastic job,
        those of the last world's first ``min_np`` ranks (as horovod.run).

    Raises:
        ValueError: If ``np`` < 1, ``np`` and ``num_proc`` (or an elastic
            argument and its horovod.run name) disagree, both ``hosts`` and
            ``hostfile`` are given, a host list is malformed or has fewer
            slots than ``np``, ``use_gloo`` is true, or the elastic
            arguments do not fit together (min_np > np, ...).
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

    from hbcore.launcher.elastic.run_fn import run_elastic_fn
    from hbcore.launcher.errors import LauncherError
    from hbcore.launcher.hosts import parse_hostfile, parse_hosts
    from hbcore.launcher.job_spec import (RUN_FN_NAMES, JobSpec,
                                          elastic_settings, is_elastic,
                                          rank_count)
    from hbcore.launcher.mpiexec import launcher_environ, nic_env
    from hbcore.launcher.outcome import collect, reraise_signal
    from hbcore.launcher.rank.run_task import FN_FILE, result_file
    from hbcore.launcher.supervisor import launch

    np = _one_of("np", np, "num_proc", num_proc)
    min_np = _one_of("min_np", min_np, "min_num_proc", min_num_proc)
    max_np = _one_of("max_np", max_np, "max_num_proc", max_num_proc)
    if use_gloo:
        raise ValueError("use_gloo=True: hbcore has no Gloo controller; "
                         "ranks always use MPI")
    if hosts is not None and hostfile is not None:
        raise ValueError("give hosts or hostfile, not both")
    host_list = (parse_hosts(hosts) if hosts is not None else
                 parse_hostfile(hostfile) if hostfile is not None else None)
    if np is None:
        np = (min_np or 1) if is_elastic(min_np, max_np,
                                         host_discovery_script) else 1
    np = rank_count(RUN_FN_NAMES, np, host_list)
    elastic = elastic_settings(
        RUN_FN_NAMES, np, min_np, max_np, host_discovery_script, host_list,
        slots, reset_limit, cooldown_range, None, os.environ,
        [name for name, value in (("reset_limit", reset_limit),
                                  ("cooldown_range", cooldown_range))
         if value is not None])
    if isinstance(mpi_args, str):
        mpi_args = shlex.split(mpi_args)
    if isinstance(network_interface, str):
        network_interface = [name.strip()
                             for name in network_interface.split(",")
                             if name.strip()]

    workdir = tempfile.mkdtemp(prefix="hbcore-run-")
    try:
        with open(os.path.join(workdir, FN_FILE), "wb") as f:
            pickle.dump(list(sys.path), f)
            cloudpickle.dump((fn, tuple(args), dict(kwargs or {})), f)
        environ = dict(os.environ)
        environ.update(env or {})
        environ = launcher_environ(environ, ssh_port=ssh_port,
                                   ssh_identity_file=ssh_identity_file)
        job = JobSpec(
            command=[executable or sys.executable, RUN_TASK, workdir],
            np=np, hosts=host_list, env=nic_env(network_interface),
            mpi_args=list(mpi_args or ()),
            output_dir=(os.path.abspath(output_filename)
                        if output_filename else None),
            verbose=verbose, environ=environ, stdin=subprocess.DEVNULL,
            elastic=elastic, program="hbcore.run")
        if elastic is not None:
            return run_elastic_fn(job, workdir)
        try:
            result = launch(job)
        except LauncherError as exc:
            raise RuntimeError("hbcore.run: %s" % exc) from None
        if result.interrupted_by is not None:
            reraise_signal("hbcore.run", result.interrupted_by)
        first = result.first_failure
        return collect("hbcore.run", np, {
            rank: _load(result_file(workdir, rank)) for rank in range(np)},
            None if first is None else first.rank,
            result.message("hbcore.run") or "", result.exit_code)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _one_of(name: str, value: Optional[int], alias: str,
            alias_value: Optional[int]) -> Optional[int]:
    """An argument given under its name or horovod.run's (not both, unless
    equal)."""
    if alias_value is None:
        return value
    if value is not None and value != alias_value:
        raise ValueError("%s=%r and %s=%r disagree; give one of them"
                         % (name, value, alias, alias_value))
    return alias_value


def _load(path: str) -> Optional[tuple]:
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
