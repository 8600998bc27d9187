"""Finding MPI's launcher (hydra ``mpiexec``) and building its command line.

hbrun speaks hydra's option syntax (MPICH, Intel MPI, the ``mpich`` wheel):
``-n``, ``-hosts``, ``-genvall``, ``-genv NAME VALUE``, ``-env`` and ``:``
between MPMD segments.  Open MPI's ``mpirun`` is not supported.
"""

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Mapping, Optional, Sequence

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.hosts import Host, hydra_hosts_arg
# Run by path (see rank/rank_wrapper.py for why).
from hbcore.launcher.rank import RANK_WRAPPER


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_mpiexec(environ: Optional[Mapping[str, str]] = None) -> str:
    """Finds the hydra ``mpiexec`` to launch ranks with.

    Order: ``HB_MPIEXEC`` (an explicit override wins), then ``mpiexec``
    next to the running Python (the mpich wheel installs it in the same
    ``bin`` as the venv's python, and it matches the MPI library the core
    was built against), then ``mpiexec.hydra`` / ``mpiexec`` on PATH.

    Args:
        environ: Environment to read HB_MPIEXEC and PATH from
            (default: os.environ).

    Returns:
        The absolute path of the launcher.

    Raises:
        LauncherError: If HB_MPIEXEC names no executable, or none is found.
    """
    environ = os.environ if environ is None else environ
    override = environ.get("HB_MPIEXEC")
    if override:
        found = shutil.which(override, path=environ.get("PATH"))
        if found is None:
            raise LauncherError(
                "HB_MPIEXEC=%r is not an executable file" % override)
        return os.path.abspath(found)
    here = os.path.dirname(sys.executable)
    for name in ("mpiexec", "mpiexec.hydra"):
        candidate = os.path.join(here, name)
        if _executable(candidate):
            return candidate
    # On PATH the explicit hydra name goes first: a plain "mpiexec" there
    # may belong to another MPI.
    for name in ("mpiexec.hydra", "mpiexec"):
        found = shutil.which(name, path=environ.get("PATH"))
        if found:
            return os.path.abspath(found)
    raise LauncherError(
        "no mpiexec found next to %s or on PATH; install the MPICH wheel "
        "(pip install mpich) or set HB_MPIEXEC to a hydra mpiexec"
        % sys.executable)


# Where hydra takes extra arguments for its launcher (ssh): MPICH's hydra,
# and Intel MPI's.
LAUNCHER_EXTRA_ARGS_VARS = ("HYDRA_LAUNCHER_EXTRA_ARGS",
                            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS")


def launcher_environ(environ: Mapping[str, str],
                     ssh_port: Optional[int] = None,
                     ssh_identity_file: Optional[str] = None
                     ) -> Dict[str, str]:
    """Returns mpiexec's environment with horovodrun's ssh settings added.

    Hydra starts its proxies on other hosts with ``ssh [extra] host ...``;
    the extra arguments come from ``HYDRA_LAUNCHER_EXTRA_ARGS`` (Intel MPI:
    ``I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS``).  ``-p PORT`` and
    ``-i FILE`` are appended to what the environment already holds there.

    Args:
        environ: The environment mpiexec would get.
        ssh_port: ``ssh -p`` value, or None.
        ssh_identity_file: ``ssh -i`` value, or None.

    Returns:
        A copy of ``environ``, with the variables above set when a port or
        identity file is given.

    Raises:
        ValueError: If the identity file's path contains whitespace (hydra
            splits the extra arguments on whitespace).
    """
    env = dict(environ)
    extra = []
    if ssh_port is not None:
        extra += ["-p", str(int(ssh_port))]
    if ssh_identity_file is not None:
        if not ssh_identity_file or any(c.isspace()
                                        for c in ssh_identity_file):
            raise ValueError("ssh identity file %r: the path must be "
                             "non-empty and without whitespace (hydra splits "
                             "ssh's arguments on whitespace)"
                             % ssh_identity_file)
        extra += ["-i", ssh_identity_file]
    if extra:
        for name in LAUNCHER_EXTRA_ARGS_VARS:
            env[name] = " ".join(([env[name]] if env.get(name) else [])
                                 + extra)
    return env


def nic_env(nics: Optional[Sequence[str]]) -> Dict[str, str]:
    """Returns the rank variables for horovodrun's ``--network-interface``.

    As horovodrun does under MPICH: NCCL's socket transport (also NCCL's
    bootstrap between hosts) is limited to the interfaces.

    Args:
        nics: Interface names, or None/empty for no restriction.

    Returns:
        ``{"NCCL_SOCKET_IFNAME": "eth0,eth1"}``, or ``{}``.
    """
    if not nics:
        return {}
    return {"NCCL_SOCKET_IFNAME": ",".join(sorted(set(nics)))}


def mpiexec_version(mpiexec: str, timeout: float = 10.0) -> str:
    """Returns a one-line description of the launcher's version.

    Hydra's ``--version`` starts with "HYDRA build details:"; the
    "Version:" line is appended to it so the line says something.

    Args:
        mpiexec: Path of the launcher.
        timeout: Seconds to wait for it.

    Returns:
        E.g. ``"HYDRA build details: Version 5.0.2"``.

    Raises:
        LauncherError: If the launcher cannot be run.
    """
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True,
                              text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError("cannot run %s --version: %s" % (mpiexec, exc))
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines()
             if line.strip()]
    if not lines:
        return "(no version output, exit code %d)" % proc.returncode
    first = lines[0]
    if first.startswith("HYDRA build details"):
        for line in lines[1:]:
            if line.startswith("Version:"):
                return "%s %s" % (first, " ".join(line.split()))
    return first


def wrapped_command(command: Sequence[str],
                    output_dir: Optional[str] = None,
                    timestamp: bool = False) -> List[str]:
    """Returns the per-rank command: the rank wrapper running ``command``.

    Args:
        command: The user's command (e.g. ``["python", "train.py"]``).
        output_dir: Directory for per-rank output files, or None.
        timestamp: Prefix every output line with the local time.

    Returns:
        ``[sys.executable, RANK_WRAPPER, (--output-dir DIR,) (--timestamp,)
        "--", *command]``.
    """
    args = [sys.executable, RANK_WRAPPER]
    if output_dir is not None:
        args += ["--output-dir", output_dir]
    if timestamp:
        args.append("--timestamp")
    return args + ["--"] + list(command)


def build_command(mpiexec: str, rank_command: Sequence[str], np: int,
                  hosts: Optional[Sequence[Host]] = None,
                  env: Optional[Mapping[str, str]] = None,
                  mpi_args: Sequence[str] = (),
                  per_rank_env: Optional[Sequence[Dict[str, str]]] = None
                  ) -> List[str]:
    """Builds the mpiexec command line.

    Args:
        mpiexec: Path of the launcher.
        rank_command: What every rank runs (usually ``wrapped_command``).
        np: Number of ranks.
        hosts: Hosts and slots, or None for the local host.
        env: Variables set on every rank (``-genv``); the rest of the
            environment is passed with ``-genvall``.
        mpi_args: Extra launcher arguments, inserted before the ranks.
        per_rank_env: If given, one dict per rank (``len == np``) of
            variables for that rank only; ranks become MPMD segments
            ``-n 1 -env K V CMD : ...``.

    Returns:
        The argument list.

    Raises:
        ValueError: If ``np < 1`` or ``per_rank_env`` has the wrong length.
    """
    if np < 1:
        raise ValueError("np must be >= 1, got %d" % np)
    if per_rank_env is not None and len(per_rank_env) != np:
        raise ValueError("per_rank_env has %d entries for %d ranks"
                         % (len(per_rank_env), np))
    args = [mpiexec]
    if hosts:
        args += ["-hosts", hydra_hosts_arg(list(hosts))]
    args.append("-genvall")
    for name, value in sorted((env or {}).items()):
        args += ["-genv", name, str(value)]
    args += list(mpi_args)
    if per_rank_env is None:
        return args + ["-n", str(np)] + list(rank_command)
    for index, rank_env in enumerate(per_rank_env):
        if index:
            args.append(":")
        args += ["-n", "1"]
        for name, value in sorted(rank_env.items()):
            args += ["-env", name, str(value)]
        args += list(rank_command)
    return args
