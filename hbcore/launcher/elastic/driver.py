"""hbrun's elastic driver: a job that outlives its ranks and hosts.

MPI (the MPICH we ship) cannot drop a dead peer from a communicator, so a
membership change ends the current MPI world and starts a new one, as
TorchElastic does.  Each world is a *generation*: one ``mpiexec`` through
hydra over the hosts usable at its start.  What the ranks committed lives
outside their processes, in a per-host store in shared memory
(hbcore/elastic/store.py), so the next generation starts from the last
commit (docs/elastic.md).

The driver's loop, one turn per generation g:
1. Hosts: the fixed ``-H`` list or the discovery script's answer, minus
   the blacklisted hosts and the slots whose worker finished (exited 0).
   Fewer than ``--min-np`` slots (``-np`` for the first generation): ask
   again every second; after ``--elastic-timeout`` seconds the job ends.
   Hosts keep the order in which they were first seen (older hosts get
   the lowest ranks); at most ``--max-np`` slots are used.
2. Launch: the generation's ranks get HB_ELASTIC_GENERATION=g,
   HB_ELASTIC_HOSTS and HB_ELASTIC_STORE (elastic_protocol.py).  While it
   runs, a poller asks the discovery script again every second; when the
   usable hosts change it posts the generation's host-change notice
   (elastic/notice.py), which the ranks see at their next commit
   (HostsUpdatedInterrupt).  A
   discovery error stops the generation and ends the job.
3. End of the generation, from every rank status read:
   - every rank exited 0 after its elastic function returned (or, a
     program without ``hvd.elastic.run``, all within the settle second
     of supervisor.py): the job is done (exit 0);
   - a rank failed (signal, or a code other than 0 and REFORM_EXIT_CODE):
     its host is blacklisted and the failure recorded.  A rank that hung
     (stopped, or stuck in the kernel) for HB_STALL_SHUTDOWN_TIME_SECONDS,
     else --elastic-timeout (which the ranks get as TIMEOUT_VAR), is one:
     its wrapper SIGKILLs it and reports why (hang_watch.py).  So is a
     rank stuck in its own code, its process running: the core's stall
     shutdown (after the same limit) ends the others, which leave with
     REFORM_EXIT_CODE and name it in their status (RankStatus.stalled);
   - a rank exited 0 before its elastic function returned (a worker that
     ends early; its wrapper reports it): the generation ends, and its
     slot leaves the job (the others go on from the last commit);
   - ranks exited REFORM_EXIT_CODE: they asked for a re-formation
     (host change, or their runtime failed because a peer died or left).
   Any of the last three is a reset: more than ``--reset-limit`` resets
   end the job.  Then g + 1.
The job's store is removed when the driver ends, however it ends, and the
supervisor leaves no rank running (supervisor.py).  A job that ends
without success prints which limit ended it and every failure recorded.

Front ends whose workers are not started by hydra over ssh (Ray actors,
Spark tasks: elastic/hosted.py) give a ``GenerationBackend``: its
``discover`` answers step 1 and the poller, its ``launch`` runs step 2's
world, and the rest of the loop (limits, resets, the notice, the store)
is this one.
"""

import contextlib
import dataclasses
import glob
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import psutil

from hbcore.launcher.elastic.discovery import Blacklist, run_discovery_script
from hbcore.launcher.elastic.notice import KEY_VAR, NOTICE_VAR, NoticeServer
from hbcore.launcher.errors import LauncherError
from hbcore.launcher.hosts import Host, hydra_hosts_arg, total_slots
from hbcore.launcher.job_spec import ElasticSettings, JobSpec
from hbcore.launcher.outcome import (Stopped, on_stop_signals, raise_stopped,
                                     stopped_line)
from hbcore.launcher.rank.elastic_protocol import (GENERATION_VAR, HOSTS_VAR,
                                                   REFORM_EXIT_CODE, STORE_VAR,
                                                   TIMEOUT_VAR, host_of_rank)
from hbcore.launcher.rank.rank_status import RankStatus
from hbcore.launcher.supervisor import SETTLE_S, LaunchResult, launch

# How often hosts are asked for (horovodrun: once a second).
DISCOVERY_INTERVAL_S = 1.0
# The supervisor's settle pause after a rank killed by a signal (kill -9,
# the OOM killer, a lost host): its peers are blocked on it in a
# collective and will not report, so the pause of a fixed job (a second,
# for ranks failing together to print their own errors) would only delay
# the re-formation.  Ranks that died with it at once (the other slots of
# a lost host) still report within it.  After any other first status
# (an error exit, an early exit 0, REFORM_EXIT_CODE) the others usually
# follow, and the full pause keeps their statuses.
KILLED_SETTLE_S = 0.1


class GenerationBackend(NamedTuple):
    """Where a front end's workers come from (see the module comment).

    Attributes:
        discover: Returns the hosts (with slots) available now; a
            LauncherError ends the job.
        launch: Runs one generation's world and waits for its end:
            ``launch(hosts, rank_env, events, seen, settle_for)`` with
            ``supervisor.launch``'s meaning of the last three; returns
            the LaunchResult (one aborted without a rank status: a host
            of a rank went away, a reset), or raises LauncherError to end
            the job.
        blacklist_failures: Whether a failed rank's host is blacklisted
            (hbrun's hosts: yes).  A front end whose engine reports lost
            machines itself (a dead Ray node, a lost Spark executor leave
            its ``discover`` answer) says no: its failed rank's slot is
            filled again at the next generation.
        report: Called with each line of the driver's final report.
    """
    discover: Callable[[], List[Host]]
    launch: Callable[..., LaunchResult]
    blacklist_failures: bool
    report: Callable[[str], None]


class _JobEnd(Exception):
    """Ends the driver's loop with a reason (the first line of the report)."""



class _Hosts:
    """The hosts a generation may use (step 1 of the module comment)."""

    def __init__(self, settings: ElasticSettings,
                 discover: Optional[Callable[[], List[Host]]] = None
                 ) -> None:
        self._settings = settings
        self._discover = discover
        self.blacklist = Blacklist(settings.cooldown_range)
        self.finished: Dict[str, int] = {}
        self._order: Dict[str, int] = {}

    def discover(self) -> List[Host]:
        """All hosts known now (LauncherError if the script fails)."""
        settings = self._settings
        if self._discover is not None:
            return self._discover()
        if settings.discovery_script is not None:
            return run_discovery_script(settings.discovery_script,
                                        settings.slots_per_host)
        if settings.fixed_hosts is not None:
            return list(settings.fixed_hosts)
        return [Host("localhost", settings.np)]

    def usable(self, hosts: Sequence[Host]) -> List[Host]:
        """``hosts`` without blacklisted hosts and finished slots, oldest
        first, capped at ``--max-np`` slots."""
        for host in hosts:
            self._order.setdefault(host.name, len(self._order))
        left = []
        for host in sorted(self.blacklist.usable(hosts),
                           key=lambda h: self._order[h.name]):
            slots = host.slots - self.finished.get(host.name, 0)
            if slots > 0:
                left.append(Host(host.name, slots))
        cap = self._settings.max_np
        if cap is None:
            return left
        capped = []
        for host in left:
            take = min(host.slots, cap - total_slots(capped))
            if take > 0:
                capped.append(Host(host.name, take))
        return capped

    def wait(self, needed: int) -> List[Host]:
        """Waits for ``needed`` usable slots (step 1)."""
        deadline = time.monotonic() + self._settings.timeout_s
        while True:
            known = self.discover()
            hosts = self.usable(known)
            if total_slots(hosts) >= needed:
                return hosts
            if (self._settings.discovery_script is None
                    and self._discover is None
                    and self._settings.cooldown_range is None
                    and all(self.blacklist.blocked(h.name) for h in known)):
                raise _JobEnd("every host is blacklisted (%s)" % ", ".join(
                    h.name for h in known))
            if time.monotonic() >= deadline:
                raise _JobEnd(
                    "fewer than %d slots (--min-np) for %g s "
                    "(--elastic-timeout): usable hosts %s"
                    % (needed, self._settings.timeout_s,
                       hydra_hosts_arg(hosts) or "none"))
            time.sleep(DISCOVERY_INTERVAL_S)


class _Poller(threading.Thread):
    """Asks for hosts while a generation runs (step 2)."""

    def __init__(self, hosts: _Hosts, current: List[Host],
                 notice: NoticeServer, generation: int,
                 events: "queue.Queue") -> None:
        super().__init__(daemon=True)
        self._hosts, self._current, self._notice = hosts, current, notice
        self._generation = generation
        self._events = events
        self.stopped = threading.Event()
        self.error: Optional[str] = None

    def run(self) -> None:
        while not self.stopped.wait(DISCOVERY_INTERVAL_S):
            try:
                usable = self._hosts.usable(self._hosts.discover())
            except LauncherError as exc:
                self.error = str(exc)
                self._events.put(("abort", self.error))
                return
            if usable != self._current:
                self._notice.post(self._generation,
                                  removed_only(self._current, usable))


def removed_only(current: List[Host], usable: List[Host]) -> bool:
    """Whether going from ``current`` to ``usable`` only takes hosts or
    slots away (Horovod's HostsUpdatedInterrupt.skip_sync)."""
    had = {h.name: h.slots for h in current}
    return all(h.slots <= had.get(h.name, 0) for h in usable)


def _store_root() -> str:
    """The job's store: in shared memory where there is one.

    Stores of this user's hbrun processes that are gone (killed by
    SIGKILL, which leaves no chance to clean up) are removed first, so
    they do not hold shared memory forever.
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    for stale in glob.glob(os.path.join(base, "hbcore-elastic-*-*")):
        pid = os.path.basename(stale).split("-")[2]
        try:
            if (pid.isdigit() and not psutil.pid_exists(int(pid))
                    and os.stat(stale).st_uid == os.getuid()):
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="hbcore-elastic-%d-" % os.getpid(),
                            dir=base)


def _host_name(hosts: List[Host], rank: int) -> str:
    return host_of_rank([(h.name, h.slots) for h in hosts], rank)[0]


def _settle_for(status: RankStatus) -> float:
    """The settle pause after ``status``, the generation's first."""
    return KILLED_SETTLE_S if status.signal is not None else SETTLE_S


def _rank_end(status: RankStatus, hosts: List[Host]) -> str:
    return "rank %d on host %s %s" % (
        status.rank, _host_name(hosts, status.rank), status.describe())


def _describe(status: RankStatus, hosts: List[Host], generation: int) -> str:
    return "generation %d: %s" % (generation, _rank_end(status, hosts))


def run_elastic(job: JobSpec,
                backend: Optional[GenerationBackend] = None) -> int:
    """Runs an elastic job to its end (see the module comment).

    Args:
        job: The job; its ``elastic`` holds the limits, its ``env`` the
            variables of every rank (with a backend only those two and
            ``program`` are read).
        backend: A front end's hosts and launch, or None: hbrun's.

    Returns:
        The exit code: 0 when a generation ended with every rank exiting
        0; 128 + signal when hbrun was interrupted; else 1.
    """
    settings = job.elastic
    assert settings is not None, "run_elastic needs an elastic JobSpec"
    program = job.program
    store = _store_root()
    # Between generations (waiting for hosts) a signal ends the job, and
    # the store is still removed; while a generation runs, the supervisor
    # catches the signals itself and stops the ranks first.
    stop_signals = contextlib.ExitStack()
    stop_signals.enter_context(on_stop_signals(raise_stopped))
    hosts_state = _Hosts(settings,
                         None if backend is None else backend.discover)

    def report(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if backend is not None:
            backend.report(line)

    notice = NoticeServer()
    failures: List[str] = []
    resets = 0
    generation = 0
    try:
        while True:
            needed = settings.np if generation == 0 else settings.min_np
            hosts = hosts_state.wait(needed)
            sys.stderr.write("%s: elastic generation %d on %s\n"
                             % (program, generation, hydra_hosts_arg(hosts)))
            sys.stderr.flush()
            rank_env = dict(job.env)
            rank_env.update({GENERATION_VAR: str(generation),
                             HOSTS_VAR: hydra_hosts_arg(hosts),
                             STORE_VAR: store, NOTICE_VAR: notice.address,
                             KEY_VAR: notice.key,
                             TIMEOUT_VAR: str(settings.timeout_s)})
            events: "queue.Queue" = queue.Queue()
            seen: List[RankStatus] = []
            poller = _Poller(hosts_state, hosts, notice, generation, events)
            poller.start()
            try:
                if backend is not None:
                    result = backend.launch(hosts, rank_env, events, seen,
                                            _settle_for)
                else:
                    result = launch(
                        dataclasses.replace(job, np=total_slots(hosts),
                                            hosts=hosts, env=rank_env),
                        events=events, seen=seen, settle_for=_settle_for)
            finally:
                poller.stopped.set()
                poller.join()
            if result.interrupted_by is not None:
                report(result.message(program))
                return result.exit_code
            if poller.error is not None:
                raise _JobEnd(poller.error)
            # A SIGTERM after the first failure is the teardown's (hydra's
            # or ours), not a failure of that rank's host.
            failed = [s for i, s in enumerate(seen)
                      if s.exit_code not in (0, REFORM_EXIT_CODE)
                      and not (i > 0 and s.signal == signal.SIGTERM)]
            # Ranks stuck in their own code, as their peers saw them.
            stuck = sorted({r for s in seen for r in (s.stalled or [])
                            if 0 <= r < total_slots(hosts)}
                           - {s.rank for s in failed})
            left = [s for s in seen if s.exit_code == 0]
            reform = any(s.exit_code == REFORM_EXIT_CODE for s in seen)
            if not failed and not reform and (
                    (result.exit_code == 0 and not left)
                    or len(left) == total_slots(hosts)):
                return 0
            if not failed and not reform and not left:
                if backend is None or result.aborted is None:
                    raise _JobEnd(result.message(program) or
                                  "mpiexec exited with code %s"
                                  % result.mpiexec_code)
                # A backend's host of a rank went away (its process died,
                # its Spark stage failed): a reset, as a rank's failure.
                failures.append("generation %d: %s"
                                % (generation, result.aborted))
                sys.stderr.write("%s: elastic generation %d ended (%s)\n"
                                 % (program, generation, result.aborted))
                sys.stderr.flush()
            if seen:
                # When each part of a re-formation happens (benchmarks/
                # elastic.py reads this line): hbrun learnt of the first
                # status, stopped the world teardown_s later, and starts
                # the next generation now.
                sys.stderr.write(
                    "%s: elastic generation %d ended (%s); its ranks "
                    "stopped %.2f s after hbrun learnt it\n"
                    % (program, generation,
                       _rank_end(seen[0], hosts),
                       result.teardown_s or 0.0))
                sys.stderr.flush()
            for status in failed:
                failures.append(_describe(status, hosts, generation))
                if backend is None or backend.blacklist_failures:
                    hosts_state.blacklist.add(_host_name(hosts, status.rank))
            for rank in stuck:
                line = ("rank %d on host %s hung in its own code (the stall "
                        "shutdown ended its world)"
                        % (rank, _host_name(hosts, rank)))
                sys.stderr.write("%s: elastic generation %d: %s\n"
                                 % (program, generation, line))
                sys.stderr.flush()
                failures.append("generation %d: %s" % (generation, line))
                if backend is None or backend.blacklist_failures:
                    hosts_state.blacklist.add(_host_name(hosts, rank))
            for status in left:
                host = _host_name(hosts, status.rank)
                hosts_state.finished[host] = (
                    hosts_state.finished.get(host, 0) + 1)
            resets += 1
            if settings.reset_limit is not None and (
                    resets > settings.reset_limit):
                raise _JobEnd("reset limit %d (--reset-limit) reached"
                              % settings.reset_limit)
            generation += 1
    except Stopped as exc:
        report(stopped_line(program, exc.signum, "the elastic job"))
        return 128 + exc.signum
    except (_JobEnd, LauncherError) as exc:
        report("%s: elastic job failed: %s" % (program, exc))
        if failures:
            report("%s: failures:\n%s" % (
                program, "\n".join("  " + f for f in failures)))
        return 1
    finally:
        stop_signals.close()
        notice.close()
        shutil.rmtree(store, ignore_errors=True)
