"""``hbcore.ray.ElasticRayExecutor``: an elastic hbcore job on Ray.

Like ``horovod.ray.ElasticRayExecutor``: the hosts are the Ray cluster's
live nodes, each with ``CPU // cpus_per_slot`` slots (and at most
``GPU // gpus_per_slot`` with use_gpu), found again every second while
the job runs; a generation places one actor per slot on its node (the
node's ``node:<ip>`` resource) and each actor hosts its rank for one call
of ``worker_fn`` (hbcore/launcher/elastic/hosted.py, whose generations
are hbrun's elastic driver's). A rank killed or lost ends its
generation: the next one, on the nodes Ray reports then, goes on from
the last commit; a node added to the cluster joins at the next commit
(the host-change notice), up to ``max_num_proc`` slots.
"""

import dataclasses
import math
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import ray

from hbcore.launcher.elastic.hosted import (HostedElasticJob, Outcomes,
                                            elastic_limits, horovod_counts)
from hbcore.launcher.hosts import Host, total_slots
from hbcore.launcher.job_spec import ElasticSettings
from hbcore.launcher.manual.hosted_rank import MemberSpec, lost
from hbcore.launcher.mpiexec import nic_env
from hbcore.launcher.rank.elastic_protocol import host_of_rank
from hbcore.ray.runner import MARGIN_S, Worker

PROGRAM = "hbcore.ray.ElasticRayExecutor"
# Horovod's ElasticSettings arguments that create_settings passes on.
_SETTINGS_KWARGS = ("cooldown_range", "verbose")


@dataclasses.dataclass
class ElasticRaySettings:
    """``ElasticRayExecutor.create_settings``' object (the fields of
    Horovod's ElasticSettings that hbcore uses).

    Attributes:
        min_num_proc: Fewest ranks to go on with (also the ranks needed to
            start: ``num_proc``).
        max_num_proc: Most ranks, or None: every slot of the cluster.
        reset_limit: Most re-formations, or None: unlimited.
        elastic_timeout: Seconds to wait for ``min_num_proc`` slots.
        timeout_s: Seconds for a generation's workers to join.
        ssh_identity_file: Accepted (no ssh is used).
        nics: Network interfaces for NCCL's sockets.
        cooldown_range: Accepted as Horovod's; Ray's slots are not
            blacklisted (elastic/hosted.py).
        verbose: Print the mpiexec command lines (2).
        discovery: With ``override_discovery=False``: an object whose
            ``find_available_hosts_and_slots()`` returns
            ``{hostname: slots}`` (Horovod's HostDiscovery).
    """
    min_num_proc: int = 1
    max_num_proc: Optional[int] = None
    reset_limit: Optional[int] = None
    elastic_timeout: int = 600
    timeout_s: int = 30
    ssh_identity_file: Optional[str] = None
    nics: Optional[set] = None
    cooldown_range: Optional[Tuple[float, float]] = None
    verbose: int = 1
    discovery: Any = None

    @property
    def num_proc(self) -> int:
        """The ranks needed to start (Horovod: ``min_num_proc``)."""
        return self.min_num_proc

    def limits(self) -> ElasticSettings:
        """The elastic driver's settings (ValueError naming a bad one)."""
        if not isinstance(self.timeout_s, (int, float)) or \
                not self.timeout_s > 0:
            raise ValueError("timeout_s must be a positive number of "
                             "seconds, got %r" % (self.timeout_s,))
        return elastic_limits(self.min_num_proc, self.min_num_proc,
                              self.max_num_proc, self.reset_limit,
                              self.elastic_timeout, self.cooldown_range)


class RayHostDiscovery:
    """The Ray cluster's live nodes and their slots (horovod.ray's).

    Args:
        use_gpu: Count GPU slots too.
        cpus_per_slot: CPUs of one slot.
        gpus_per_slot: GPUs of one slot.
    """

    def __init__(self, use_gpu: bool = False, cpus_per_slot: int = 1,
                 gpus_per_slot: int = 1) -> None:
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = gpus_per_slot

    def find_available_hosts_and_slots(self) -> Dict[str, int]:
        """Returns ``{node address: slots}`` of the live nodes with a
        slot."""
        hosts: Dict[str, int] = {}
        for node in ray.nodes():
            if not node["Alive"]:
                continue
            resources = node["Resources"]
            slots = resources.get("CPU", 0) // self.cpus_per_slot
            if self.use_gpu:
                slots = min(slots,
                            resources.get("GPU", 0) // self.gpus_per_slot)
            slots = int(math.ceil(slots))
            if slots:
                address = node["NodeManagerAddress"]
                hosts[address] = hosts.get(address, 0) + slots
        return hosts


class ElasticRayExecutor:
    """An elastic hbcore job on Ray (horovod.ray.ElasticRayExecutor's
    API; see the module comment).

    Args:
        settings: From ``ElasticRayExecutor.create_settings``.
        use_gpu: Reserve GPUs for the workers.
        cpus_per_slot: CPUs Ray reserves for each worker.
        gpus_per_slot: GPUs per worker with use_gpu (default 1).
        env_vars: Variables for every rank.
        override_discovery: Find the hosts in Ray's cluster (else
            ``settings.discovery`` says them).

    Raises:
        ValueError: gpus_per_slot without use_gpu, a count below 1, or no
            discovery with ``override_discovery=False``.
    """

    @staticmethod
    def create_settings(min_num_proc: int = 1,
                        max_num_proc: Optional[int] = None,
                        reset_limit: Optional[int] = None,
                        elastic_timeout: int = 600,
                        timeout_s: int = 30,
                        ssh_identity_file: Optional[str] = None,
                        nics: Optional[set] = None,
                        min_np: Optional[int] = None,
                        max_np: Optional[int] = None,
                        **kwargs: Any) -> ElasticRaySettings:
        """Creates the settings (horovod.ray's arguments and defaults).

        Args:
            min_num_proc: Fewest ranks to start and go on with.
            max_num_proc: Most ranks (None: every slot).
            reset_limit: Most re-formations (None: unlimited).
            elastic_timeout: Seconds to wait for ``min_num_proc`` slots.
            timeout_s: Seconds for a generation's workers to join.
            ssh_identity_file: Accepted; no ssh is used.
            nics: Network interfaces for NCCL's sockets.
            min_np: Deprecated name of min_num_proc (DeprecationWarning).
            max_np: Deprecated name of max_num_proc (DeprecationWarning).
            **kwargs: ``cooldown_range``, ``verbose``.

        Returns:
            The settings.

        Raises:
            ValueError: A count or limit that is wrong (named).
            TypeError: Another keyword argument.
        """
        min_num_proc, max_num_proc = horovod_counts(
            min_num_proc, max_num_proc, min_np, max_np)
        unknown = sorted(set(kwargs) - set(_SETTINGS_KWARGS))
        if unknown:
            raise TypeError("create_settings() got unexpected keyword "
                            "arguments %s" % ", ".join(unknown))
        settings = ElasticRaySettings(
            min_num_proc=min_num_proc, max_num_proc=max_num_proc,
            reset_limit=reset_limit, elastic_timeout=elastic_timeout,
            timeout_s=timeout_s, ssh_identity_file=ssh_identity_file,
            nics=nics, **kwargs)
        settings.limits()  # raises on a bad value, here already
        return settings

    def __init__(self, settings: ElasticRaySettings, use_gpu: bool = False,
                 cpus_per_slot: int = 1,
                 gpus_per_slot: Optional[int] = None,
                 env_vars: Optional[Dict[str, str]] = None,
                 override_discovery: bool = True) -> None:
        if gpus_per_slot and not use_gpu:
            raise ValueError("gpus_per_slot is set, but use_gpu is False. "
                             "use_gpu must be True if gpus_per_slot is set. ")
        gpus_per_slot = gpus_per_slot or int(use_gpu)
        if use_gpu and gpus_per_slot < 1:
            raise ValueError("gpus_per_slot must be >= 1: Got %s."
                             % gpus_per_slot)
        if not isinstance(cpus_per_slot, int) or cpus_per_slot < 1:
            raise ValueError("cpus_per_slot must be an integer >= 1, got %r"
                             % (cpus_per_slot,))
        if override_discovery:
            settings.discovery = RayHostDiscovery(use_gpu, cpus_per_slot,
                                                  gpus_per_slot)
        elif settings.discovery is None:
            raise ValueError("override_discovery=False needs "
                             "settings.discovery")
        self.settings = settings
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = gpus_per_slot
        self.env_vars = dict(env_vars or {})
        self._started = False
        self._actors: List[Any] = []

    def start(self) -> None:
        """Checks the settings and Ray's connection; ``run`` forms the
        job (each generation waits for its slots).

        Raises:
            ValueError: A setting is wrong.
            RuntimeError: Ray is not initialized.
        """
        self.settings.limits()
        if not ray.is_initialized():
            raise RuntimeError("%s: Ray is not initialized (call "
                               "ray.init() first)" % PROGRAM)
        self._started = True

    def run(self, worker_fn: Callable[[], Any],
            callbacks: Optional[List[Callable]] = None) -> List[Any]:
        """Runs ``worker_fn()`` on every worker, generation after
        generation, until one generation's workers all return.

        Args:
            worker_fn: The elastic training function (calls
                ``hbcore.init()`` and ``hvd.elastic.run`` itself).
            callbacks: Not supported (must be empty).

        Returns:
            The values of the last generation's workers, in rank order.

        Raises:
            RuntimeError: Not started; a rank raised (its error and
                traceback); the job ended otherwise (the driver's report:
                too few slots for ``elastic_timeout``, the reset limit).
            NotImplementedError: callbacks were given.
        """
        if callbacks:
            raise NotImplementedError("%s: callbacks are not supported yet"
                                      % PROGRAM)
        if not self._started:
            raise RuntimeError("%s: not started (call start() first)"
                               % PROGRAM)
        env = {str(k): str(v) for k, v in self.env_vars.items()}
        env.update(nic_env(list(self.settings.nics or ())))
        job = HostedElasticJob(
            self.settings.limits(), self._discover, self._place,
            ray.util.get_node_ip_address(), "Ray worker", PROGRAM,
            float(self.settings.timeout_s),
            {"env": env, "verbose": self.settings.verbose >= 2})
        try:
            return job.run(worker_fn, (), {}, list(sys.path))
        finally:
            self._kill_actors()

    def _discover(self) -> List[Host]:
        found = self.settings.discovery.find_available_hosts_and_slots()
        return [Host(name, slots) for name, slots in found.items()]

    def _place(self, spec: MemberSpec, hosts: List[Host], payload: bytes,
               _abort: Callable[[str], None]) -> Callable[[bool], Outcomes]:
        """One actor per slot on its node, each hosting its rank."""
        actor = ray.remote(Worker)
        pairs = [(h.name, h.slots) for h in hosts]
        nodes = {n["NodeManagerAddress"] for n in ray.nodes()}
        refs = []
        for rank in range(total_slots(hosts)):
            node = host_of_rank(pairs, rank)[0]
            options: Dict[str, Any] = {
                "num_cpus": self.cpus_per_slot,
                "num_gpus": self.gpus_per_slot if self.use_gpu else 0,
                "max_restarts": 0}
            if node in nodes:  # not so for a discovery of the user's
                options["resources"] = {"node:%s" % node: 0.01}
            worker = actor.options(**options).remote()
            self._actors.append(worker)
            refs.append(worker.run_once.remote(spec, rank, payload))

        def collect(_succeeded: bool) -> Outcomes:
            # The job has ended: the actors return within seconds (those
            # never scheduled do not, and are killed).
            ready = set(ray.wait(refs, num_returns=len(refs),
                                 timeout=MARGIN_S)[0])
            outcomes: Outcomes = {}
            for rank, ref in enumerate(refs):
                try:
                    outcomes[rank] = (ray.get(ref) if ref in ready else
                                      lost("Ray worker %d did not end"
                                           % rank))
                except ray.exceptions.RayError as exc:
                    outcomes[rank] = lost("Ray worker %d: %s" % (
                        rank, (str(exc) or type(exc).__name__
                               ).splitlines()[0]))
            self._kill_actors()
            return outcomes

        return collect

    def _kill_actors(self) -> None:
        actors, self._actors = self._actors, []
        for worker in actors:
            ray.kill(worker)

    def shutdown(self) -> None:
        """Stops any worker still running; the executor can be started
        again."""
        self._kill_actors()
        self._started = False
