"""``hbcore.ray.RayExecutor``: Ray actors as one hbcore job.

Like ``horovod.ray.RayExecutor``: ``start()`` places ``num_workers``
actors (``num_hosts`` x ``num_workers_per_host``), each hosting one rank
(hbcore/launcher/manual/hosted_rank.py); the driver is the rendezvous'
coordinator and runs mpiexec (hosted_job.py), so the actors' ranks form
one MPI world over hydra's manual launcher. Ranks follow the actors'
nodes (ranks on one node are consecutive), then creation order. A rank is
a process of its own under the actor that lives from ``start`` to
``shutdown``, so what one call leaves (``hbcore.init()``, the executable
object of ``start(executable_cls)``) is there for the next, as in
Horovod's actors.

Failure: a function that raises on any rank ends the job (its ranks may be
waiting for each other in a collective): the call raises that rank's
error, every actor is stopped, and the executor must be started again.
"""

import dataclasses
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cloudpickle
import ray
from ray.util.placement_group import (placement_group,
                                      remove_placement_group)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hbcore.launcher.manual.hosted_job import HostedJob
from hbcore.launcher.manual.hosted_rank import HostedRank, MemberSpec, run_once
from hbcore.launcher.mpiexec import nic_env

PROGRAM = "hbcore.ray.RayExecutor"
# Seconds the driver gives the actors beyond the start timeout to report
# (scheduling, the rendezvous' own error message), and to stop.
MARGIN_S = 30.0


@dataclasses.dataclass
class MiniSettings:
    """``RayExecutor.create_settings``' object (horovod.ray's fields).

    Attributes:
        ssh_identity_file: Accepted (hbcore's Ray jobs use no ssh).
        ssh_str: Accepted (idem).
        timeout_s: Seconds for every actor to join the job.
        placement_group_timeout_s: Seconds for Ray to place the actors.
        nics: Network interfaces for NCCL's sockets.
        elastic: False (elastic jobs: ElasticRayExecutor, elastic.py).
    """
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None
    timeout_s: int = 30
    placement_group_timeout_s: int = 100
    nics: Optional[set] = None
    elastic: bool = False

    @property
    def start_timeout(self) -> float:
        """The start timeout, as horovod's settings name it."""
        return float(self.timeout_s)


class Worker:
    """The actor: hosts one rank (created with ``ray.remote``)."""

    def __init__(self) -> None:
        self._rank: Optional[HostedRank] = None

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def start(self, spec: MemberSpec, index: int) -> Optional[str]:
        """Joins the job as rank ``index``; returns None or why not."""
        self._rank = HostedRank(spec, index)
        try:
            self._rank.start()
        except Exception as exc:  # reported by the driver, with the job's
            return str(exc)
        return None

    def call(self, payload: bytes) -> Tuple[str, Any]:
        """One call on the rank (hosted_rank.HostedRank.call)."""
        return self._rank.call(payload)

    def run_once(self, spec: MemberSpec, index: int,
                 payload: bytes) -> Tuple[str, Any]:
        """Hosts rank ``index`` for one call (an elastic generation);
        returns its outcome (hosted_rank.run_once)."""
        return run_once(spec, index, payload)[1]

    def stop(self) -> Tuple[int, str]:
        """Ends the rank; returns the job's (code, message)."""
        if self._rank is None:
            return 0, ""
        return self._rank.stop()


class RayExecutor:
    """An hbcore job on Ray actors (horovod.ray.RayExecutor's API).

    Args:
        settings: From ``RayExecutor.create_settings``.
        num_workers: Number of workers (ranks).
        num_hosts: Instead of num_workers: machines to spread over, each
            with ``num_workers_per_host`` workers.
        num_workers_per_host: Workers per machine with ``num_hosts``.
        cpus_per_worker: CPUs Ray reserves for each worker.
        use_gpu: Reserve GPUs for the workers (Ray sets each actor's
            CUDA_VISIBLE_DEVICES, which its rank inherits).
        gpus_per_worker: GPUs per worker with use_gpu (default 1).
        use_current_placement_group: Place the workers in the placement
            group this driver runs in, if any, instead of a new one.
        min_workers, max_workers, reset_limit, cooldown_range,
        elastic_timeout, override_discovery: horovod.ray's elastic
            arguments; refused: hbcore's elastic Ray jobs are
            ElasticRayExecutor's.

    Raises:
        ValueError: Not exactly one of num_workers and num_hosts, a count
            below 1, or min_workers together with num_workers.
        NotImplementedError: An elastic job (min_workers or max_workers).
    """

    @classmethod
    def create_settings(cls, timeout_s: int = 30,
                        ssh_identity_file: Optional[str] = None,
                        ssh_str: Optional[str] = None,
                        placement_group_timeout_s: int = 100,
                        nics: Optional[set] = None) -> MiniSettings:
        """Creates the executor's settings (horovod.ray's arguments).

        Args:
            timeout_s: Seconds for every worker to join the job.
            ssh_identity_file: Accepted; no ssh is used.
            ssh_str: Accepted; no ssh is used (nothing is written).
            placement_group_timeout_s: Seconds for Ray to place workers.
            nics: Network interfaces for NCCL's sockets.

        Returns:
            The settings.
        """
        return MiniSettings(ssh_identity_file=ssh_identity_file,
                            ssh_str=ssh_str, timeout_s=timeout_s,
                            placement_group_timeout_s=placement_group_timeout_s,
                            nics=nics)

    def __init__(self, settings: MiniSettings,
                 num_workers: Optional[int] = None,
                 num_hosts: Optional[int] = None,
                 num_workers_per_host: int = 1, cpus_per_worker: int = 1,
                 use_gpu: bool = False,
                 gpus_per_worker: Optional[int] = None,
                 use_current_placement_group: bool = True,
                 min_workers: Optional[int] = None,
                 max_workers: Optional[int] = None,
                 reset_limit: Optional[int] = None,
                 cooldown_range: Optional[List[int]] = None,
                 elastic_timeout: int = 600,
                 override_discovery: bool = True) -> None:
        if min_workers is not None and num_workers is not None:
            raise ValueError("Both `min_workers` and `num_workers` provided. "
                             "Only one of the above is allowed as workloads "
                             "cannot be elastic and non-elastic.")
        if min_workers is not None or max_workers is not None:
            raise NotImplementedError("%s: elastic jobs (min_workers, "
                                      "max_workers) are not supported: use "
                                      "hbcore.ray.ElasticRayExecutor"
                                      % PROGRAM)
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("give num_workers or num_hosts (with "
                             "num_workers_per_host), not %s"
                             % ("both" if num_workers else "neither"))
        for name, value in (("num_workers", num_workers),
                            ("num_hosts", num_hosts),
                            ("num_workers_per_host", num_workers_per_host),
                            ("cpus_per_worker", cpus_per_worker)):
            if value is not None and (not isinstance(value, int)
                                      or isinstance(value, bool)
                                      or value < 1):
                raise ValueError("%s must be an integer >= 1, got %r"
                                 % (name, value))
        self.settings = settings
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.num_workers = (num_workers if num_workers is not None
                            else num_hosts * num_workers_per_host)
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self._workers: List[Any] = []
        self._job: Optional[HostedJob] = None
        self._group: Optional[Any] = None  # a placement group we made

    # -- start -----------------------------------------------------------
    def start(self, executable_cls: Optional[type] = None,
              executable_args: Optional[Sequence[Any]] = None,
              executable_kwargs: Optional[Dict[str, Any]] = None,
              extra_env_vars: Optional[Dict[str, str]] = None) -> None:
        """Starts the workers and forms the job.

        Args:
            executable_cls: A class instantiated on every rank (in the rank
                process); ``execute`` passes the instance to its function.
            executable_args: Its positional arguments.
            executable_kwargs: Its keyword arguments.
            extra_env_vars: Variables for every rank.

        Raises:
            RuntimeError: Already started; the workers could not be placed
                or did not join within ``settings.timeout_s`` (the message
                says which); creating the executable raised.
        """
        if self._workers:
            raise RuntimeError("%s: start() was called already; shutdown() "
                               "first" % PROGRAM)
        env = {str(k): str(v) for k, v in (extra_env_vars or {}).items()}
        env.update(nic_env(list(self.settings.nics or ())))
        try:
            self._workers = self._place()
            self._job = HostedJob(self.num_workers, "Ray worker", PROGRAM,
                                  self.settings.start_timeout, env)
            spec = self._job.spec(ray.util.get_node_ip_address())
            errors = ray.get([w.start.remote(spec, i)
                              for i, w in enumerate(self._workers)],
                             timeout=self.settings.start_timeout + MARGIN_S)
        except BaseException as exc:
            self._teardown()
            if isinstance(exc, ray.exceptions.GetTimeoutError):
                raise RuntimeError("%s: the workers did not start within "
                                   "%gs" % (PROGRAM,
                                            self.settings.start_timeout)
                                   ) from None
            raise
        if any(errors):
            try:
                message = self._job.wait(MARGIN_S)[1]
            except TimeoutError:
                message = ""
            self._teardown()
            raise RuntimeError(message or next(e for e in errors if e))
        if executable_cls is not None:
            self._call_all(executable_cls, tuple(executable_args or ()),
                           dict(executable_kwargs or {}), "make-executable")

    def _place(self) -> List[Any]:
        """Creates the actors, ordered by node (ranks per node
        consecutive)."""
        resources = {"num_cpus": self.cpus_per_worker,
                     "num_gpus": self.gpus_per_worker}
        group, bundle_of = self._placement_group()
        actor = ray.remote(Worker)
        workers = []
        for index in range(self.num_workers):
            options = dict(resources)
            if group is not None:
                options["scheduling_strategy"] = \
                    PlacementGroupSchedulingStrategy(
                        group, placement_group_bundle_index=bundle_of(index))
            workers.append(actor.options(**options).remote())
        nodes = ray.get([w.node_id.remote() for w in workers],
                        timeout=self.settings.placement_group_timeout_s)
        first_seen = {node: i for i, node in reversed(list(enumerate(nodes)))}
        order = sorted(range(len(workers)),
                       key=lambda i: (first_seen[nodes[i]], i))
        return [workers[i] for i in order]

    def _placement_group(self) -> Tuple[Optional[Any], Callable[[int], int]]:
        """The placement group the workers go in, and worker -> bundle."""
        if self.num_hosts is not None:
            per_host = self.num_workers_per_host
            bundle = {"CPU": self.cpus_per_worker * per_host}
            if self.gpus_per_worker:
                bundle["GPU"] = self.gpus_per_worker * per_host
            strategy = "STRICT_SPREAD"
            bundles = [bundle] * self.num_hosts
        else:
            current = ray.util.get_current_placement_group()
            if self.use_current_placement_group and current is not None:
                return current, lambda index: -1
            per_host = 1
            bundle = {"CPU": self.cpus_per_worker}
            if self.gpus_per_worker:
                bundle["GPU"] = self.gpus_per_worker
            strategy = "PACK"
            bundles = [bundle] * self.num_workers
        group = placement_group(bundles, strategy=strategy)
        self._group = group
        try:
            ray.get(group.ready(),
                    timeout=self.settings.placement_group_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                "%s: Ray could not place %d bundles of %s (%s) within "
                "placement_group_timeout_s=%gs" % (
                    PROGRAM, len(bundles), bundle, strategy,
                    self.settings.placement_group_timeout_s)) from None
        return group, lambda index: index // per_host

    # -- calls -------------------------------------------------------------
    def _call_all(self, fn: Callable[..., Any], args: Tuple[Any, ...],
                  kwargs: Dict[str, Any], mode: str,
                  workers: Optional[List[Any]] = None) -> List[Any]:
        if not self._workers or self._job is None:
            raise RuntimeError("%s: not started (call start() first; after a "
                               "failed call the job is over and needs "
                               "start() again)" % PROGRAM)
        payload = cloudpickle.dumps((list(sys.path), fn, args, kwargs, mode))
        targets = self._workers if workers is None else workers
        values = ray.get([w.call.remote(payload) for w in targets])
        outcomes = dict(enumerate(values))
        if all(o[0] == "ok" for o in values):
            return [o[1] for o in values]
        # The job is over (the failing rank exited); report it and stop.
        try:
            self._job.wait(self.settings.start_timeout + MARGIN_S)
        except TimeoutError:
            self._job.abort("a worker's call failed")
        job = self._job
        self._teardown()
        if workers is not None:  # execute_single: rank 0 alone
            outcomes.update({r: ("ok", None)
                             for r in range(1, job.size)})
        return job.results(outcomes)

    def execute(self, fn: Callable[[Any], Any],
                callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """Runs ``fn(executable)`` on every worker.

        Args:
            fn: Called with the object ``start(executable_cls)`` created on
                that rank (None without one).
            callbacks: Not supported (must be empty).

        Returns:
            The values, in rank order.

        Raises:
            RuntimeError: Not started; a rank raised (its error and
                traceback; the executor is then stopped).
            NotImplementedError: callbacks were given.
        """
        self._no_callbacks(callbacks)
        return self._call_all(fn, (), {}, "executable")

    def run(self, fn: Callable[..., Any],
            args: Optional[Sequence[Any]] = None,
            kwargs: Optional[Dict[str, Any]] = None,
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """Runs ``fn(*args, **kwargs)`` on every worker.

        Args:
            fn: The function (calls ``hbcore.init()`` itself, once).
            args: Its positional arguments.
            kwargs: Its keyword arguments.
            callbacks: As ``execute``'s.

        Returns and Raises: as ``execute``.
        """
        self._no_callbacks(callbacks)
        return self._call_all(fn, tuple(args or ()), dict(kwargs or {}),
                              "call")

    def execute_single(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(executable)`` on rank 0 only.

        Returns:
            Its value.

        Raises:
            RuntimeError: Not started, or it raised (the executor is then
                stopped).
        """
        if not self._workers:
            return self._call_all(fn, (), {}, "executable")  # raises
        return self._call_all(fn, (), {}, "executable",
                              workers=self._workers[:1])[0]

    @staticmethod
    def _no_callbacks(callbacks: Optional[List[Callable]]) -> None:
        if callbacks:
            raise NotImplementedError("%s: callbacks are not supported yet"
                                      % PROGRAM)

    # -- shutdown ----------------------------------------------------------
    def shutdown(self) -> None:
        """Stops every rank, proxy and actor (and the placement group it
        made); the executor can be started again."""
        self._teardown()

    def _teardown(self) -> None:
        workers, self._workers = self._workers, []
        job, self._job = self._job, None
        if workers:
            try:
                ray.get([w.stop.remote() for w in workers],
                        timeout=self.settings.start_timeout + MARGIN_S)
            except (ray.exceptions.RayError, TimeoutError):
                pass  # killing the actors below ends what is left
        if job is not None:
            job.abort("%s was shut down" % PROGRAM)
            try:
                job.wait(MARGIN_S)
            except TimeoutError:
                pass
        for worker in workers:
            ray.kill(worker)
        if self._group is not None:
            remove_placement_group(self._group)
            self._group = None
