"""The TF_CONFIG front end of the rendezvous: ``python -m hbcore.run CMD``
(or ``hbrun --tf-config CMD``) started on every machine of a TF_CONFIG
cluster forms one job, as ``python -m hybridbackend.run`` does.

Every training task (chief, then workers by index; tf_config.py) is a
member of the rendezvous (rendezvous.py), named ``chief:0``,
``worker:1``, ...; the first one's launcher is the coordinator and
listens on that task's TF_CONFIG port. Each member runs one worker per
visible GPU (CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES, devices.py),
or one; machines may run different counts. Ranks are consecutive per
task, in task order. Every worker gets, as HybridBackend's launcher gives
it, a TF_CONFIG of its own: the cluster with one chief/worker entry per
rank (``host:`` HB_RUN_BASE_PORT + local index, default 20001) and its
task, ``chief:0`` for rank 0 and ``worker:<rank - 1>`` for the others
(``worker:<rank>`` when the cluster has no chief), which hb.context
reports as task_type and task_id.

``ps`` and ``evaluator`` tasks take no part in the collective job: their
launcher runs the command once, alone, with CUDA_VISIBLE_DEVICES empty
and TF_CONFIG unchanged (as HybridBackend's launcher does).

All machines must run the same command with the same Python and hbcore
paths (hydra starts the coordinator's rank command on every machine): the
rendezvous checks that, together with the cluster, and names what differs.
"""

import contextlib
import dataclasses
import json
import queue
import signal
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple

from hbcore import tf_config
from hbcore.launcher.command_job import run_command_job
from hbcore.launcher.devices import worker_devices
from hbcore.launcher.errors import LauncherError
from hbcore.launcher.job_spec import JobSpec
from hbcore.launcher.manual.hydra_manual import find_proxy
from hbcore.launcher.manual.placed_job import LocalProxy, run_placed
from hbcore.launcher.manual.rendezvous import (Coordinator, Member, Placement,
                                               RendezvousError)
from hbcore.launcher.mpiexec import find_mpiexec, wrapped_command
from hbcore.launcher.outcome import (Stopped, on_stop_signals,
                                     placed_job_report, raise_stopped,
                                     stopped_line)
from hbcore.launcher.rank import RANK_WRAPPER
from hbcore.launcher.rank.rank_status import parent_death_preexec
from hbcore.launcher.supervisor import TERMINATE_GRACE_S

# horovodrun's default --start-timeout.
DEFAULT_START_TIMEOUT_S = 30
# HybridBackend's first per-GPU port (its HB_RUN_BASE_PORT default).
DEFAULT_BASE_PORT = 20001
# How often a member looks up from waiting for the job's end.
_POLL_S = 0.5


def rank_tf_config(config: tf_config.TfConfig,
                   placements: List[Placement], rank: int,
                   base_port: int) -> Dict[str, Any]:
    """The TF_CONFIG a worker gets (HybridBackend's launcher's rewrite).

    Args:
        config: The machines' TF_CONFIG.
        placements: The members' places, in member (rank) order.
        rank: The worker's rank.
        base_port: Port of each machine's first worker in the rewrite.

    Returns:
        The worker's TF_CONFIG.
    """
    addresses = []
    for placement in placements:
        task = tf_config.Task.from_name(placement.arrival.name)
        host, _port = tf_config.split_address(config.address(task))
        host = "[%s]" % host if ":" in host else host
        addresses += ["%s:%d" % (host, base_port + i)
                      for i in range(placement.arrival.workers)]
    cluster = {kind: list(tasks) for kind, tasks in config.cluster.items()
               if kind not in tf_config.TRAINING_TYPES}
    head = next((k for k in ("chief", "master") if k in config.cluster), None)
    if head is not None:
        cluster[head] = addresses[:1]
        if len(addresses) > 1:
            cluster["worker"] = addresses[1:]
        task = ({"type": head, "index": 0} if rank == 0
                else {"type": "worker", "index": rank - 1})
    else:
        cluster["worker"] = addresses
        task = {"type": "worker", "index": rank}
    return {"cluster": cluster, "task": task}


class _Job:
    """One machine's part of a TF_CONFIG job (see the module docstring)."""

    def __init__(self, job: JobSpec, start_timeout_s: float,
                 config: tf_config.TfConfig,
                 environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = dict(environ)
        self.program = job.program
        self.mpi_args = job.mpi_args
        self.verbose = job.verbose
        self.members = [str(t) for t in config.training_tasks]
        self.me = str(config.task)
        head = config.training_tasks[0]
        self.coordinator_host, self.coordinator_port = \
            tf_config.split_address(config.address(head))
        self.devices = worker_devices(environ)
        self.workers = len(self.devices) if self.devices else 1
        self.secret = environ.get("HB_RENDEZVOUS_SECRET", "").encode()
        self.start_timeout = start_timeout_s
        self.mpiexec = find_mpiexec(environ)
        self.proxy = find_proxy(self.mpiexec)
        self.rank_command = wrapped_command(job.command, job.output_dir,
                                            job.timestamp_output)
        # The proxy's environment is the ranks' environment on this
        # machine (the coordinator's mpiexec passes none of its own).
        self.proxy_env = dict(environ)
        self.proxy_env.update(job.env)
        try:
            self.base_port = int(environ.get("HB_RUN_BASE_PORT",
                                             DEFAULT_BASE_PORT))
        except ValueError:
            raise LauncherError("HB_RUN_BASE_PORT=%r is not a port number"
                                % environ.get("HB_RUN_BASE_PORT")) from None
        # What every machine must agree on (the rendezvous compares it).
        self.job = {"cluster": config.cluster, "command": list(job.command),
                    "python": sys.executable, "wrapper": RANK_WRAPPER}

    def describe(self, member: str) -> str:
        """``task worker:1 (host:port)`` for messages."""
        task = tf_config.Task.from_name(member)
        return "task %s (%s)" % (member, self.config.address(task))

    # -- the coordinator (the first training task's machine) -------------
    def coordinate(self, coordinator: Coordinator,
                   events: "queue.Queue") -> None:
        """Runs the rendezvous and the job, then tells every member its
        outcome (on its own thread)."""
        try:
            placements = coordinator.wait_for_members()
        except RendezvousError:
            return  # every member was told
        segments, places = [], []
        for placement in placements:
            for local in range(placement.arrival.workers):
                rank = placement.first_rank + local
                env = {"TF_CONFIG": json.dumps(rank_tf_config(
                    self.config, placements, rank, self.base_port))}
                if placement.arrival.devices is not None:
                    env["CUDA_VISIBLE_DEVICES"] = \
                        placement.arrival.devices[local]
                segments.append(env)
                places.append("%s, its worker %d" % (
                    self.describe(placement.arrival.name), local))
        try:
            result = run_placed(coordinator, placements, segments,
                                self.rank_command,
                                self.mpi_args,
                                self.environ, events,
                                self.verbose,
                                self.program)
        except LauncherError as exc:
            coordinator.end(1, "%s: error: %s" % (self.program, exc))
            return
        coordinator.end(result.exit_code, placed_job_report(
            result, self.program, places,
            "; stopped the job on every machine"))

    # -- every machine -------------------------------------------------
    def run(self) -> int:
        """Runs this machine's part; returns the launcher's exit code."""
        events: "queue.Queue" = queue.Queue()
        coordinator_thread = None
        coordinator = None
        try:
            if self.me == self.members[0]:
                coordinator = Coordinator(
                    self.members, self.job, self.secret,
                    ("", self.coordinator_port), self.start_timeout,
                    describe=self.describe,
                    on_failure=lambda why: events.put(("abort", why)))
                coordinator_thread = threading.Thread(
                    target=self.coordinate, args=(coordinator, events),
                    daemon=True, name="rendezvous-coordinator")
                coordinator_thread.start()
            code, message = self._member()
        except RendezvousError as exc:
            code, message = 1, self._error_line(str(exc))
        finally:
            if coordinator is not None:
                # A member that stopped on a signal ends the job; wait for
                # the coordinator's teardown so nothing is left running.
                events.put(("abort", "the coordinator's launcher stopped"))
                if coordinator_thread is not None:
                    coordinator_thread.join(TERMINATE_GRACE_S * 3 + 5)
                coordinator.close()
        if message:
            sys.stderr.write(message.rstrip("\n") + "\n")
            sys.stderr.flush()
        return code

    def _error_line(self, text: str) -> str:
        """``hbcore.run: error: TEXT`` (TEXT may be a coordinator's report
        that has its prefix already)."""
        if text.startswith(self.program + ":"):
            return text
        return "%s: error: %s" % (self.program, text)

    def _member(self) -> Tuple[int, str]:
        member = Member(self.me, self.workers, self.devices, self.job,
                        self.secret,
                        (self.coordinator_host, self.coordinator_port),
                        self.start_timeout)
        stop_signals = contextlib.ExitStack()
        stop_signals.enter_context(on_stop_signals(raise_stopped))
        proxy: Optional[LocalProxy] = None
        try:
            start = member.join()
            # pdeathsig only where this process is single-threaded (see
            # parent_death_preexec): then the proxy cannot outlive us.
            preexec = (parent_death_preexec(signal.SIGTERM)
                       if threading.active_count() == 1 else None)
            proxy = LocalProxy(self.proxy, self.coordinator_host, start,
                               self.proxy_env, preexec)
            while True:
                outcome = member.wait_for_end(_POLL_S)
                if outcome is not None:
                    code, message = outcome
                    if message and not message.startswith(self.program):
                        # Not the coordinator's report: the proxy's own
                        # words may say what happened here.
                        message = self._error_line(message + proxy.text())
                    return code, message
                proxy.refresh()
        except Stopped as exc:
            return 128 + exc.signum, stopped_line(
                self.program, exc.signum, "this machine's workers")
        finally:
            member.close()
            if proxy is not None:
                proxy.stop()
            stop_signals.close()


def side_task_env() -> Dict[str, str]:
    """Variables of a ps or evaluator task's single process (as
    HybridBackend's launcher: no GPU)."""
    return {"CUDA_VISIBLE_DEVICES": ""}


def run_tf_config_job(job: JobSpec, start_timeout_s: Optional[float],
                      environ: Mapping[str, str]) -> int:
    """Runs this machine's part of a TF_CONFIG job.

    Args:
        job: The command line's job (its command, rank variables, output
            and mpiexec settings; its rank count and hosts are unused: the
            cluster and each machine's devices decide).
        start_timeout_s: Seconds for every machine to arrive (None:
            DEFAULT_START_TIMEOUT_S).
        environ: The launcher's environment (TF_CONFIG, devices, ...).

    Returns:
        The exit code: 0, or the job's first failure's (the same on every
        machine), or 1 for a failed rendezvous, which the message names.
    """
    program = job.program
    try:
        config = tf_config.parse(environ.get("TF_CONFIG", ""))
    except ValueError as exc:
        sys.stderr.write("%s: error: %s\n" % (program, exc))
        return 2
    if config is None:
        sys.stderr.write("%s: error: --tf-config needs TF_CONFIG naming a "
                         "cluster and this task\n" % program)
        return 2
    if not config.trains:
        # A ps or evaluator task: the command once, alone, without a GPU.
        return run_command_job(dataclasses.replace(
            job, np=1, hosts=None, elastic=None,
            per_rank_env=[side_task_env()]))
    try:
        return _Job(job, float(start_timeout_s or DEFAULT_START_TIMEOUT_S),
                    config, environ).run()
    except LauncherError as exc:
        sys.stderr.write("%s: error: %s\n" % (program, exc))
        return 1
