"""Runs one rank's command as a child and reports how it ended.

hbrun starts every rank as ``python .../rank_wrapper.py [--output-dir DIR]
-- CMD...`` under mpiexec.  The wrapper

- starts CMD as its child, with the child's stdout/stderr on pipes that are
  copied line by line with a rank prefix (rank_output.py);
- forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the child;
- arranges (Linux ``PR_SET_PDEATHSIG``) that the child is killed if the
  wrapper itself dies, so a rank never outlives its wrapper as an orphan;
- kills the child (SIGKILL) once it has hung, stopped or stuck in the
  kernel, for the hang limit (hang_watch.py);
- under the elastic driver, starts a keeper that removes the job's store
  on this host once the driver is gone (store_keeper.py);
- when the child ends with a nonzero code or by a signal (or, under the
  elastic driver, exits 0 before its training function returned), writes
  one status line (``STATUS_MARKER`` + JSON, rank_status.py) on stderr.
  hbrun reads mpiexec's stderr, hides these lines, and stops the whole job
  on the first one.

Why a status line on stderr and not a status file: stderr reaches hbrun
through hydra from every host, so failure detection also works for ranks on
other machines, without a shared file system.

Why a wrapper at all: hydra does not end the job when a rank exits with a
nonzero code before MPI is initialised (or while the others sleep or wait on
each other); it waits forever.  And when a rank dies by a signal, hydra's
report names the wrong process.  The wrapper tells hbrun exactly which rank
ended and how.

The wrapper is run by file path, not with ``-m hbcore.launcher...``: that
would import the ``hbcore`` package (and with it the native core and MPI
library) in every wrapper, and make the launch fail when the core is
broken.  So this file and the modules it imports (rank_output.py,
rank_status.py, hang_watch.py, elastic_protocol.py, store_keeper.py,
wire.py) use the standard library only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, List, Optional, Sequence, Tuple

if __package__:
    from hbcore.launcher.rank.elastic_protocol import (GENERATION_VAR,
                                                       REFORM_EXIT_CODE,
                                                       STORE_VAR,
                                                       finished_path,
                                                       stalled_path)
    from hbcore.launcher.rank.hang_watch import hang_limit, wait_watching
    from hbcore.launcher.rank.rank_output import (LinePump, STDERR, STDOUT,
                                                  line_prefix, rank_dir_name,
                                                  timestamped_prefix,
                                                  write_all)
    from hbcore.launcher.rank.rank_status import (RankStatus, format_status,
                                                  parent_death_preexec)
    from hbcore.launcher.rank.store_keeper import start_keeper
else:  # run by path: sys.path[0] is this directory
    from elastic_protocol import (GENERATION_VAR,  # type: ignore
                                  REFORM_EXIT_CODE, STORE_VAR,
                                  finished_path, stalled_path)
    from hang_watch import hang_limit, wait_watching  # type: ignore
    from rank_output import (LinePump, STDERR, STDOUT, line_prefix,  # type: ignore
                             rank_dir_name, timestamped_prefix, write_all)
    from rank_status import (RankStatus, format_status,  # type: ignore
                             parent_death_preexec)
    from store_keeper import start_keeper  # type: ignore

# Signals the wrapper passes on to the rank's process.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                     signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

# How long to wait, after the child ended, for its output pipes to drain.
# A grandchild that inherited the pipes can keep them open forever; the
# status must be reported anyway.
_DRAIN_TIMEOUT_S = 2.0

_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")


def env_rank_and_size() -> Tuple[int, int]:
    """Returns this process's (rank, size) from the MPI launcher's env.

    Returns:
        (rank, size); (0, 1) when no launcher variables are set.
    """
    def first_int(names: Sequence[str], default: int) -> int:
        for name in names:
            value = os.environ.get(name)
            if value is not None and value.strip().isdigit():
                return int(value)
        return default
    return first_int(_RANK_VARS, 0), first_int(_SIZE_VARS, 1)


def _parse_args(argv: List[str]
                ) -> Tuple[Optional[str], bool, List[str]]:
    output_dir = None
    timestamp = False
    args = list(argv)
    while args and args[0] != "--":
        if args[0] == "--output-dir" and len(args) > 1:
            output_dir = args[1]
            args = args[2:]
        elif args[0] == "--timestamp":
            timestamp = True
            args = args[1:]
        else:
            raise SystemExit("rank_wrapper: unexpected argument %r" % args[0])
    command = args[1:]
    if not command:
        raise SystemExit("usage: rank_wrapper.py [--output-dir DIR] "
                         "[--timestamp] -- CMD...")
    return output_dir, timestamp, command


def _open_tee(output_dir: Optional[str], rank: int, size: int,
              stream: str):
    if output_dir is None:
        return None
    directory = os.path.join(output_dir, rank_dir_name(rank, size))
    os.makedirs(directory, exist_ok=True)
    return open(os.path.join(directory, stream), "wb")


def _marker(path_of: Callable[[str, int, int], str],
            rank: int) -> Optional[str]:
    """Under hbrun's elastic driver: this rank's marker made by
    ``path_of`` (elastic_protocol.py), else None."""
    generation = os.environ.get(GENERATION_VAR)
    store = os.environ.get(STORE_VAR)
    if not generation or not store:
        return None
    return path_of(store, int(generation), rank)


def _left_early(rank: int) -> bool:
    """Under hbrun's elastic driver: whether a rank that exited 0 did so
    before its elastic function returned (elastic_protocol.py).  The
    driver must tell such a worker from one that finished, so it gets a
    status line."""
    finished = _marker(finished_path, rank)
    return finished is not None and not os.path.exists(finished)


def _stalled(rank: int, returncode: int) -> Optional[List[int]]:
    """Under hbrun's elastic driver: the ranks that a rank leaving for a
    re-formation saw stuck in their own code (its stalled marker,
    elastic_protocol.py), else None."""
    marker = _marker(stalled_path, rank)
    if returncode != REFORM_EXIT_CODE or marker is None:
        return None
    try:
        with open(marker) as f:
            ranks = json.load(f)
    except (OSError, ValueError):
        return None
    if not (isinstance(ranks, list) and ranks and all(
            isinstance(r, int) and not isinstance(r, bool) for r in ranks)):
        return None
    return ranks


def run_rank(command: List[str], output_dir: Optional[str] = None,
             timestamp: bool = False) -> int:
    """Runs one rank's command, relays its output, and reports its end.

    Args:
        command: The rank's command line.
        output_dir: If set, raw copies of the output go to
            ``output_dir/rank.N/stdout`` and ``.../stderr``.
        timestamp: Put the local time in front of every relayed line
            (hbrun --prefix-output-with-timestamp).

    Returns:
        The wrapper's exit code: the child's code, or 128 + signal.
    """
    rank, size = env_rank_and_size()
    try:
        tees = {name: _open_tee(output_dir, rank, size, name)
                for name in (STDOUT, STDERR)}
    except OSError as exc:
        # E.g. --output-filename names a file, or is not writable on this
        # host: report it as this rank's failure, with the path.
        write_all(2, line_prefix(rank, STDERR) + (
            "hbrun: cannot write --output-filename files: %s: %r\n"
            % (exc.strerror or exc, exc.filename)).encode())
        write_all(2, format_status(RankStatus(
            rank, 1, None, socket.gethostname(), os.getpid(), time.time())))
        return 1
    # Before the rank starts (its lock on the store is inherited) and
    # before the output pumps' threads (the keeper is forked).
    start_keeper(os.environ, _marker(finished_path, rank))
    try:
        # close_fds=False: the rank must inherit the descriptors the MPI
        # launcher gave us, above all hydra's PMI socket (PMI_FD), or
        # MPI_Init fails.  The wrapper's own files are opened
        # non-inheritable (PEP 446), so only the launcher's fds pass.
        # The wrapper keeps its copy of the PMI socket open on purpose:
        # hydra then notices a rank's death only when the wrapper exits,
        # after it wrote the status line.  Otherwise hydra may SIGKILL all
        # wrappers first, and nobody reports which rank failed.
        child = subprocess.Popen(command, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, close_fds=False,
                                 preexec_fn=parent_death_preexec())
    except OSError as exc:
        # Like a shell: 127 for "not found", 126 for "cannot execute".
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        write_all(2, line_prefix(rank, STDERR) + (
            "hbrun: cannot run %r: %s\n" % (command[0], exc.strerror)).encode())
        write_all(2, format_status(RankStatus(
            rank, code, None, socket.gethostname(), os.getpid(), time.time())))
        return code

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except OSError:
            pass
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)

    prefix = timestamped_prefix if timestamp else line_prefix
    pumps = [LinePump(child.stdout, 1, prefix(rank, STDOUT), tees[STDOUT]),
             LinePump(child.stderr, 2, prefix(rank, STDERR), tees[STDERR])]
    for pump in pumps:
        pump.start()
    returncode, hung = wait_watching(child, hang_limit(os.environ))
    ended = time.time()
    deadline = time.monotonic() + _DRAIN_TIMEOUT_S
    for pump in pumps:
        pump.join(max(0.0, deadline - time.monotonic()))

    if returncode == 0 and not _left_early(rank):
        return 0
    status = RankStatus(
        rank=rank,
        exit_code=returncode if returncode >= 0 else None,
        signal=-returncode if returncode < 0 else None,
        host=socket.gethostname(), pid=child.pid, time=ended, hung=hung,
        stalled=_stalled(rank, returncode))
    try:
        write_all(2, format_status(status))
    except OSError:
        pass  # hbrun is gone; nobody is left to tell.
    return status.shell_code


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: ``rank_wrapper.py [--output-dir DIR] [--timestamp] --
    CMD...``.

    Args:
        argv: Arguments without the program name (default: sys.argv[1:]).

    Returns:
        The exit code for the wrapper process.
    """
    output_dir, timestamp, command = _parse_args(
        sys.argv[1:] if argv is None else argv)
    return run_rank(command, output_dir, timestamp)


if __name__ == "__main__":
    sys.exit(main())
