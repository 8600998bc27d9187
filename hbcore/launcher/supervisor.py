"""Runs mpiexec, stops the whole job on the first rank failure, cleans up.

How failures are detected: every rank runs under the rank wrapper, which
writes a status line on stderr when its rank exits with a nonzero code or
is killed by a signal (rank_wrapper.py).  The output relays (output.py)
hand those lines to the supervisor's event queue.  The first failure status
ends the wait: the supervisor tears the job down and reports that rank.

Why not rely on mpiexec: hydra waits forever when a rank exits with an
error code while the others wait for it (before MPI_Init, in a barrier, in
``time.sleep``), and when a rank dies by a signal it reports the wrong pid.

Teardown, in order (after a settle pause in which ranks failing at about
the same moment, often with the same bad setting, still get their own
error out: it ends once every rank has failed or mpiexec has exited, and
after a second at most, so a job whose other ranks wait for the failed one
ends a second later; the owner of a launch may choose a shorter pause per
first failure: the elastic driver waits 0.1 s after a rank killed by a
signal, whose peers are blocked on it and will not report):
1. SIGTERM to mpiexec, so hydra stops its proxies and ranks, including
   those on other hosts, which this process cannot reach.
2. After at most a second, SIGTERM to every local process of the job still
   alive: the process tree below mpiexec plus every descendant seen while
   the job ran (an orphan re-parented to init is no longer "below" anyone).
3. After the grace period, SIGKILL to whatever is left.
A process counts as gone once it is a zombie: it has exited, and only its
parent's wait is missing.  A rank whose wrapper died is re-parented to
init, and the init of a container (PID 1 of ``docker run`` without
``--init``) may reap it seconds later; waiting for that (as
``psutil.wait_procs`` does) cost each elastic re-formation 1.5 s in the
development container.

The supervisor also catches SIGINT, SIGTERM and SIGHUP sent to its own
process (Ctrl-C on hbrun) and tears the job down the same way, so no rank
outlives hbrun.  mpiexec runs in its own session, so a terminal's Ctrl-C
reaches hbrun only and the teardown happens once, in order.
"""

import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, TextIO, Tuple)

import psutil

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.job_spec import JobSpec
from hbcore.launcher.mpiexec import build_command, find_mpiexec, wrapped_command
from hbcore.launcher.output import OutputRelay, make_sink
from hbcore.launcher.job_watchdog import JobWatchdog
from hbcore.launcher.outcome import (first_failure_line, on_stop_signals,
                                     stopped_line)
from hbcore.launcher.rank.rank_status import RankStatus, parent_death_preexec

# Seconds a terminated process gets to exit before it is killed.
TERMINATE_GRACE_S = 3.0
# Seconds mpiexec gets to stop its own job before we signal each process.
_MPIEXEC_STOP_S = 1.0
# How often the set of the job's processes is refreshed while it runs.
_TREE_REFRESH_S = 1.0
# How often a teardown checks whether the processes it signalled are gone.
_EXIT_POLL_S = 0.01
# How long to wait for the output relays to finish after mpiexec ended.
_RELAY_DRAIN_S = 2.0
# Longest pause between the first failure and the teardown, so that ranks
# failing at about the same moment (often with a different error) still get
# their output through mpiexec before it is stopped.  A rank still importing
# its framework when a faster one failed would otherwise be stopped before
# it prints its own error (0.25 s was too short on a loaded 2-CPU machine).
SETTLE_S = 1.0


class LaunchResult(NamedTuple):
    """The outcome of a launch.

    Attributes:
        exit_code: 0 if all ranks exited 0; else the first failing rank's
            exit code, or 128 + signal if it was killed by a signal (or
            128 + the signal that interrupted the launcher).
        np: The number of ranks launched.
        first_failure: The first rank that failed, if any rank did.
        interrupted_by: Signal number that interrupted the launcher itself.
        mpiexec_code: mpiexec's own return code (negative: killed by us).
        aborted: Why the owner of the launch stopped it (``abort`` events,
            e.g. a machine of a rendezvous went away), or None.
        teardown_s: Seconds from the first failure (or abort, or signal)
            reaching the supervisor to the end of the launch (settle
            pause, teardown, output drained), or None when mpiexec ended
            by itself.
    """
    exit_code: int
    np: int
    first_failure: Optional[RankStatus]
    interrupted_by: Optional[int]
    mpiexec_code: Optional[int]
    aborted: Optional[str] = None
    teardown_s: Optional[float] = None

    def message(self, program: str = "hbrun") -> Optional[str]:
        """Returns the one-line failure report, or None on success.

        Args:
            program: Name that starts the line.

        Returns:
            E.g. ``"hbrun: rank 1 failed first: exited with code 3 [host vm,
            pid 42]; stopped the remaining ranks"``.
        """
        if self.interrupted_by is not None:
            return stopped_line(program, self.interrupted_by, "all ranks")
        if self.aborted is not None:
            return "%s: %s; stopped all ranks" % (program, self.aborted)
        failure = self.first_failure
        if failure is not None:
            return first_failure_line(
                program, failure, "",
                "; stopped the remaining ranks" if self.np > 1 else "")
        if self.exit_code != 0:
            return ("%s: mpiexec exited with code %s and no rank reported a "
                    "failure (see mpiexec's messages above)"
                    % (program, self.mpiexec_code))
        return None


class ProcessTree:
    """The local processes of a job: a root and every descendant seen.

    Args:
        root_pid: The pid of mpiexec.
    """

    def __init__(self, root_pid: int) -> None:
        self._root = psutil.Process(root_pid)
        self._seen: Dict[int, psutil.Process] = {root_pid: self._root}

    def refresh(self) -> None:
        """Remembers the current descendants of the root."""
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self._seen.setdefault(child.pid, child)

    def alive(self) -> List[psutil.Process]:
        """Returns the remembered processes that still run.

        ``is_running`` compares creation times, so a recycled pid is not
        mistaken for one of ours.
        """
        self.refresh()
        return [p for p in self._seen.values() if p.is_running()
                and _not_zombie(p)]

    def terminate(self, grace_s: float) -> None:
        """Stops the whole job; see the module docstring for the order.

        Args:
            grace_s: Seconds between SIGTERM and SIGKILL.
        """
        self.refresh()
        _signal_all([self._root], signal.SIGTERM)
        # mpiexec is our child: psutil reaps it as soon as it exits.
        psutil.wait_procs([self._root], timeout=min(_MPIEXEC_STOP_S, grace_s))
        procs = self.alive()
        _signal_all(procs, signal.SIGTERM)
        procs = _wait_exited(procs, grace_s)
        if procs:
            _signal_all(procs, signal.SIGKILL)
            _wait_exited(procs, grace_s)


def _wait_exited(procs: Sequence[psutil.Process],
                 timeout_s: float) -> List[psutil.Process]:
    """Waits until every process has exited or ``timeout_s`` passed.

    A zombie has exited (see the module comment): unlike
    ``psutil.wait_procs``, this does not wait for its parent to reap it.

    Args:
        procs: Processes just signalled (not necessarily our children).
        timeout_s: Longest wait.

    Returns:
        The processes still running at the end.
    """
    deadline = time.monotonic() + timeout_s
    left = list(procs)
    while True:
        left = [p for p in left if p.is_running() and _not_zombie(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_EXIT_POLL_S)


def _not_zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_all(procs: Sequence[psutil.Process], signum: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(signum)
        except psutil.Error:
            pass


def supervise(command: Sequence[str], np: int,
              environ: Optional[Mapping[str, str]] = None,
              stdout: Optional[TextIO] = None,
              stderr: Optional[TextIO] = None,
              stdin: Optional[int] = None,
              grace_s: float = TERMINATE_GRACE_S,
              intercept: Optional[Callable[[bytes], bool]] = None,
              events: Optional["queue.Queue"] = None,
              seen: Optional[List[RankStatus]] = None,
              settle_for: Optional[Callable[[RankStatus], float]] = None
              ) -> LaunchResult:
    """Runs an mpiexec command line until it ends or a rank fails.

    Args:
        command: The full mpiexec command line (see ``launch``).
        np: Number of ranks it starts (for the report).
        environ: Environment of mpiexec (default: os.environ).
        stdout: Stream for the ranks' stdout (default: sys.stdout).
        stderr: Stream for the ranks' stderr (default: sys.stderr).
        stdin: stdin for mpiexec (hydra forwards it to rank 0); default
            inherits ours.
        grace_s: Seconds between SIGTERM and SIGKILL in a teardown.
        intercept: Called with each line of mpiexec's stdout before it is
            relayed; a line it returns True for is not shown (the
            rendezvous reads hydra's manual-launch lines so).
        events: The queue the wait reads (default: a new one). Its owner
            may put ``("abort", reason)`` to stop the job from another
            thread.
        seen: If given, every rank status read before the teardown is
            appended to it, in arrival order (the elastic driver reads them
            all, not only the first).
        settle_for: Seconds of the settle pause after a first failure,
            given that failure (default: SETTLE_S for any).

    Returns:
        The outcome; no process of the job is left running.

    Raises:
        LauncherError: If mpiexec cannot be started.
    """
    events = queue.Queue() if events is None else events
    quiet = threading.Event()
    with on_stop_signals(lambda signum: events.put(("signal", signum))):
        # If this process dies without a teardown (SIGKILL), mpiexec gets
        # SIGTERM and stops the job itself.  The death signal is only safe
        # single-threaded (see parent_death_preexec): a launcher with
        # threads (the elastic driver, a library caller) starts a watchdog
        # process that does the same when this process is gone.
        preexec = (parent_death_preexec(signal.SIGTERM)
                   if threading.active_count() == 1 else None)
        watchdog = None
        try:
            if preexec is None:
                watchdog = JobWatchdog(grace_s)
            proc = subprocess.Popen(list(command), stdin=stdin,
                                    stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE,
                                    env=None if environ is None else dict(environ),
                                    start_new_session=True,
                                    preexec_fn=preexec)
        except OSError as exc:
            if watchdog is not None:
                watchdog.close()
            raise LauncherError("cannot start %s: %s" % (command[0], exc))
        if watchdog is not None:
            watchdog.watch(proc.pid)
        tree = ProcessTree(proc.pid)

        def on_status(status: RankStatus) -> None:
            events.put(("status", status))

        relays = [
            OutputRelay(proc.stdout, make_sink(stdout or sys.stdout),
                        on_status, quiet, intercept),
            OutputRelay(proc.stderr, make_sink(stderr or sys.stderr),
                        on_status, quiet)]
        for relay in relays:
            relay.start()
        threading.Thread(target=lambda: events.put(("exit", proc.wait())),
                         daemon=True).start()

        try:
            first_failure, interrupted_by, aborted = _wait_for_end(
                events, tree, seen)
            ending: Optional[float] = time.monotonic()
            if first_failure is not None or interrupted_by is not None:
                # Quiet first: hydra may notice the failure itself during
                # the settle pause and print its misleading banner.
                quiet.set()
                if interrupted_by is None:
                    _settle(events, np, seen, SETTLE_S if settle_for is None
                            else settle_for(first_failure))
                tree.terminate(grace_s)
            elif aborted is not None:
                quiet.set()
                tree.terminate(grace_s)
            else:
                ending = None
                # mpiexec ended by itself; a failure status may still be in
                # the pipes, and a rank's stray child may still run.
                for relay in relays:
                    relay.join(_RELAY_DRAIN_S)
                first_failure = _first_status(events, seen)
                if tree.alive():
                    quiet.set()
                    tree.terminate(grace_s)
        except BaseException:
            # Whatever went wrong here, leave no rank behind.
            quiet.set()
            tree.terminate(grace_s)
            raise
        finally:
            if watchdog is not None:
                watchdog.close()  # torn down: nothing left to watch
        try:
            mpiexec_code = proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            mpiexec_code = None
        deadline = time.monotonic() + _RELAY_DRAIN_S
        for relay in relays:
            relay.join(max(0.0, deadline - time.monotonic()))

    if interrupted_by is not None:
        exit_code = 128 + interrupted_by
    elif first_failure is not None:
        exit_code = first_failure.shell_code
    elif aborted is not None:
        exit_code = 1
    elif mpiexec_code is None:
        exit_code = 1
    else:
        exit_code = mpiexec_code if mpiexec_code >= 0 else 128 - mpiexec_code
    return LaunchResult(exit_code, np, first_failure, interrupted_by,
                        mpiexec_code, aborted,
                        None if ending is None else time.monotonic() - ending)


def _wait_for_end(events: "queue.Queue", tree: ProcessTree,
                  seen: Optional[List[RankStatus]]
                  ) -> Tuple[Optional[RankStatus], Optional[int],
                             Optional[str]]:
    """Waits for the first rank failure, a signal to us, an abort, or
    mpiexec's exit.

    Returns:
        (first failure, signal number, abort reason), each or None; all
        None when mpiexec exited.
    """
    while True:
        try:
            kind, value = events.get(timeout=_TREE_REFRESH_S)
        except queue.Empty:
            tree.refresh()  # remember descendants that may become orphans
            continue
        if kind == "status":
            if seen is not None:
                seen.append(value)
            return value, None, None
        if kind == "signal":
            return None, value, None
        if kind == "abort":
            return None, None, value
        if kind == "exit":
            return None, None, None


def _settle(events: "queue.Queue", np: int,
            seen: Optional[List[RankStatus]] = None,
            settle_s: float = SETTLE_S) -> None:
    """Waits after the first failure until every rank has failed, mpiexec
    has exited, a signal arrived or ``settle_s`` passed, whichever is first.
    The events it takes are dropped (statuses are appended to ``seen``):
    the first failure is already chosen, and the teardown that follows handles a signal the same way."""
    deadline = time.monotonic() + settle_s
    failed = 1
    while failed < np:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            kind, value = events.get(timeout=left)
        except queue.Empty:
            return
        if kind != "status":
            return
        if seen is not None:
            seen.append(value)
        failed += 1


def _first_status(events: "queue.Queue",
                  seen: Optional[List[RankStatus]] = None
                  ) -> Optional[RankStatus]:
    while True:
        try:
            kind, value = events.get_nowait()
        except queue.Empty:
            return None
        if kind == "status":
            if seen is not None:
                seen.append(value)
            return value


def launch(job: JobSpec, events: Optional["queue.Queue"] = None,
           seen: Optional[List[RankStatus]] = None,
           settle_for: Optional[Callable[[RankStatus], float]] = None
           ) -> LaunchResult:
    """Launches a job's command on its ranks through mpiexec and waits.

    Every rank runs under the rank wrapper, its output lines prefixed with
    ``[rank]<stdout>:`` / ``[rank]<stderr>:``.  The first rank that exits
    with a nonzero code or is killed ends the whole job within seconds.

    Args:
        job: What to run and where (its ``elastic`` is not read: the
            elastic driver launches each generation as a fixed job).
        events, seen, settle_for: As ``supervise``'s.

    Returns:
        A LaunchResult; ``result.message()`` is the line to print on
        failure.

    Raises:
        LauncherError: If mpiexec is not found or cannot be started.
        ValueError: If ``job.np`` < 1.
    """
    mpiexec = find_mpiexec(job.environ)
    args = build_command(mpiexec, wrapped_command(job.command, job.output_dir,
                                                  job.timestamp_output),
                         job.np, hosts=job.hosts, env=job.env,
                         mpi_args=job.mpi_args, per_rank_env=job.per_rank_env)
    if job.verbose:
        sys.stderr.write("hbrun: %s\n" % shlex.join(args))
        sys.stderr.flush()
    return supervise(args, job.np, environ=job.environ, events=events,
                     seen=seen, settle_for=settle_for, stdin=job.stdin)
