"""``hb.context``: this process's view of the job (HybridBackend's Context).

    import hbcore_tf as hb
    hb.context.rank, hb.context().world_size, hb.Context.get().is_chief

Usable without ``init()``: the first property that needs the job
initialises hbcore (``hbcore_tf.init()``), as HybridBackend scripts never
call one.

Devices. Collectives go through hbcore, not a gRPC cluster, so there is
one TF "job" of ``world_size`` tasks named ``worker``; rank r is task r and
rank 0 is the chief. Two kinds of device strings are given:

- names (``devices``, ``local_devices``, ``cpu_devices``,
  ``local_cpu_device``): fully qualified, one per rank,
  ``/job:worker/replica:0/task:<rank>/device:<GPU|CPU>:<index>``; they
  identify ranks (``rank_at`` maps them back) and are what HybridBackend
  printed;
- placements (``default_device``, ``current_device()``,
  ``hb.train.device_setter()``): what ``tf.device`` accepts in this
  process's local session, ``/device:GPU:<i>`` when this rank has a GPU
  (the GPU of index local_rank modulo the visible GPUs), else
  ``/device:CPU:0``.

``devices``, ``local_devices``, ``cpu_devices`` and ``rank_at`` of a
device name need every rank's host and GPU index: the first access of any
of them is a collective (one allgather of a small object), so every rank
must make it.

This module is in hbcore_tf's base layer: the features (embedding tables,
data) read the job and the options from it; hb.scope (hbcore_tf.scope),
which builds on it, registers itself as ``Context.scope``.
"""
import collections
import contextlib
import json
import os
import re
import socket
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import tensorflow as tf

import hbcore
from hbcore import tf_config
from hbcore_tf import mpi_ops
from hbcore_tf._base.options import Options, options as _options

JOB = "worker"
# Context.get_tf_config's result, as HybridBackend's.
TfConfig = collections.namedtuple("TfConfig",
                                  ["task_type", "task_id", "cluster"])
# A device of this job: /job:worker[/replica:0]/task:<rank>[/device:...]
_TASK = re.compile(r"^/job:%s(?:/replica:0)?/task:(\d+)(?:/|$)" % JOB)


class Context:
    """The job as this process sees it; one instance per process
    (``Context.get()``, also the module's ``context``). Calling the
    instance returns it, so ``hb.context().rank`` and ``hb.context.rank``
    both work."""

    _instance: Optional["Context"] = None

    def __init__(self) -> None:
        self._peers: Optional[List[Dict[str, Any]]] = None
        self._saving_listeners: Dict[str, Any] = {}

    @classmethod
    def get(cls) -> "Context":
        """Returns the process's Context."""
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __call__(self) -> "Context":
        return self

    def __repr__(self) -> str:
        return "Context(rank=%d, world_size=%d)" % (self.rank, self.world_size)

    # -- the job ---------------------------------------------------------
    @staticmethod
    def _core() -> Any:
        if not mpi_ops.is_initialized():
            mpi_ops.init()
        return mpi_ops

    @property
    def rank(self) -> int:
        """This process's rank (initialises hbcore on first use)."""
        return int(self._core().rank())

    @property
    def world_size(self) -> int:
        """The number of ranks in the job (initialises hbcore on first
        use)."""
        return int(self._core().size())

    @property
    def local_rank(self) -> int:
        """This process's rank among the ranks on its host."""
        return int(self._core().local_rank())

    @property
    def local_world_size(self) -> int:
        """The number of ranks on this process's host."""
        return int(self._core().local_size())

    @property
    def is_chief(self) -> bool:
        """True on rank 0, which writes checkpoints and summaries."""
        return self.rank == 0

    def _tf_task(self) -> Optional[tf_config.Task]:
        """This rank's task in TF_CONFIG when TF_CONFIG describes this
        world, as the TF_CONFIG launch (and HybridBackend's launcher) gives
        every worker: its training tasks number ``world_size`` and this
        rank's task is the rank-th of them. Otherwise None."""
        try:
            config = tf_config.parse(os.environ.get("TF_CONFIG", ""))
        except ValueError:
            return None
        if config is None or not config.trains:
            return None
        tasks = config.training_tasks
        if len(tasks) != self.world_size or tasks.index(config.task) != \
                self.rank:
            return None
        return config.task

    @property
    def task_type(self) -> str:
        """TF_CONFIG's task type when it describes this world (``"chief"``
        for rank 0, ``"worker"`` for the others, as HybridBackend's
        launcher writes it); else ``"worker"`` (the chief is worker 0)."""
        task = self._tf_task()
        return JOB if task is None else task.type

    @property
    def task_id(self) -> int:
        """TF_CONFIG's task index when it describes this world (rank - 1
        for workers when there is a chief); else the rank."""
        task = self._tf_task()
        return self.rank if task is None else task.index

    # -- devices ---------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        """GPUs visible to this process."""
        return len(tf.config.list_physical_devices("GPU"))

    @property
    def has_gpu(self) -> bool:
        """True when this process sees at least one GPU."""
        return self.num_gpus > 0

    def _gpu_index(self) -> Optional[int]:
        n = self.num_gpus
        if n == 0:
            return None
        return self.local_rank % n

    @classmethod
    def current_device(cls) -> str:
        """This rank's placement string (see the module docstring);
        callable on the class too, as HybridBackend's classmethod.

        Returns:
            ``/device:GPU:<i>`` when the rank has a GPU, else
            ``/device:CPU:0``.
        """
        index = cls.get()._gpu_index()
        return "/device:CPU:0" if index is None else "/device:GPU:%d" % index

    @property
    def default_device(self) -> str:
        """This rank's placement string, as :meth:`current_device`."""
        return self.current_device()

    def _peer_table(self) -> List[Dict[str, Any]]:
        # Collective on first use: every rank sends its host, local rank,
        # local size and GPU index.
        if self._peers is None:
            core = self._core()
            mine = {"host": socket.gethostname(), "gpu": self._gpu_index(),
                    "local_rank": int(core.local_rank()),
                    "local_size": int(core.local_size())}
            self._peers = list(hbcore.allgather_object(mine))
        return self._peers

    def _local_ranks(self) -> List[int]:
        """The ranks on this rank's host. The local communicator says how
        many there are; when they form the contiguous block that hbrun's
        placement gives (checked on every member's local rank and size),
        that block is the answer, otherwise the ranks with this hostname
        (hostnames can repeat across containers, which is why they come
        second)."""
        peers = self._peer_table()
        rank = self.rank
        first = rank - peers[rank]["local_rank"]
        block = list(range(first, first + peers[rank]["local_size"]))
        if block[-1] < len(peers) and all(
                peers[r]["local_rank"] == r - first and
                peers[r]["local_size"] == len(block) for r in block):
            return block
        host = peers[rank]["host"]
        return [r for r, p in enumerate(peers) if p["host"] == host]

    @staticmethod
    def _name(rank: int, gpu: Optional[int]) -> str:
        kind = "CPU:0" if gpu is None else "GPU:%d" % gpu
        return "/job:%s/replica:0/task:%d/device:%s" % (JOB, rank, kind)

    @property
    def devices(self) -> List[str]:
        """The device name of every rank, in rank order (collective on
        first access)."""
        return [self._name(r, p["gpu"]) for r, p in
                enumerate(self._peer_table())]

    @property
    def local_devices(self) -> List[str]:
        """Device names of the ranks on this host (collective on first
        access)."""
        peers = self._peer_table()
        return [self._name(r, peers[r]["gpu"]) for r in self._local_ranks()]

    @property
    def cpu_devices(self) -> List[str]:
        """The CPU device name of every rank (collective on first access)."""
        return [self._name(r, None) for r in range(len(self._peer_table()))]

    @property
    def local_cpu_device(self) -> str:
        """This rank's CPU device name (no collective)."""
        return self._name(self.rank, None)

    def rank_at(self, device_or_tower_id: Union[str, int]) -> int:
        """The rank that owns a device name (``.../task:<r>/...``), or, as
        in HybridBackend, the rank of this process's tower (local device)
        of that index: every hbcore rank drives one device, tower 0, so
        ``rank_at(0)`` is ``rank`` (HybridBackend defines ``rank`` so).

        The first call with a device name (or the first access of
        ``devices``, ``local_devices``, ``cpu_devices``) is a collective:
        every rank must make it. A tower id needs no collective.

        Args:
            device_or_tower_id: a device name of this job, such as
                ``/job:worker/replica:0/task:3/device:GPU:0``, or an int
                tower id of this process (a bool is neither).

        Returns:
            The rank that owns the device.

        Raises:
            ValueError: not a device of this job, or a tower other than 0.
        """
        if isinstance(device_or_tower_id, int) and \
                not isinstance(device_or_tower_id, bool):
            if device_or_tower_id != 0:
                raise ValueError(
                    "tower %d does not exist: each hbcore rank drives one "
                    "device, tower 0 (rank_at(0) is this rank)"
                    % device_or_tower_id)
            return self.rank
        size = len(self._peer_table())
        match = _TASK.match(str(device_or_tower_id))
        if match and int(match.group(1)) < size:
            return int(match.group(1))
        raise ValueError("%r is not a device of this job (devices: %s)" % (
            device_or_tower_id, ", ".join(self.devices)))

    # -- options ---------------------------------------------------------
    @property
    def options(self) -> Options:
        """The options object (hbcore_tf._base.options.options)."""
        return _options

    def update_params(self, **kwargs: Any) -> None:
        """Sets options process-wide (``options.update``).

        Raises:
            ValueError: an unknown option name or a value outside its domain.
            TypeError: a value of the wrong type.
        """
        _options.update(**kwargs)

    @classmethod
    def scope(cls, **kwargs: Any) -> Any:
        """``hb.scope(**kwargs)``; callable on the class too, as
        HybridBackend's classmethod (``hb.Context.scope(...)``).

        Args:
            **kwargs: option values for the code inside.

        Returns:
            The context manager of ``hb.scope(**kwargs)`` (it yields the
            context).
        """
        return cls._scope(**kwargs)

    # hb.scope, registered by hbcore_tf.scope when it loads: hb.scope is
    # built on this module (it yields the context), so this module cannot
    # import it. ``import hbcore_tf`` always loads hbcore_tf.scope.
    _scope: Any = None

    # -- checkpoints -----------------------------------------------------
    @property
    def saving_listeners(self) -> List[Any]:
        """CheckpointSaverListeners that hb.train.MonitoredTrainingSession
        passes to rank 0's checkpoint saver, in the order added."""
        return list(self._saving_listeners.values())

    def add_saving_listener(self, name: str, listener: Any) -> None:
        """Registers a tf.compat.v1.train.CheckpointSaverListener under a
        name (a second one with the same name replaces the first).

        Args:
            name: key of the listener; reusing it replaces the listener
                registered before under that name.
            listener: the tf.compat.v1.train.CheckpointSaverListener.

        Raises:
            TypeError: ``listener`` is not a CheckpointSaverListener.
        """
        if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
            raise TypeError("add_saving_listener(%r): expected a "
                            "tf.compat.v1.train.CheckpointSaverListener, got "
                            "%s" % (name, type(listener).__name__))
        self._saving_listeners[name] = listener

    # -- TF_CONFIG -------------------------------------------------------
    @staticmethod
    def get_tf_config() -> Optional["TfConfig"]:
        """The parsed ``TF_CONFIG`` environment variable, as HybridBackend
        returns it: a ``TfConfig(task_type, task_id, cluster)`` namedtuple,
        or None when TF_CONFIG is unset or empty.

        Returns:
            The TfConfig, or None.

        Raises:
            ValueError: TF_CONFIG is not JSON, or lacks ``task`` (with
                ``type`` and ``index``) or ``cluster``.
        """
        config = tf_config.load(os.environ.get("TF_CONFIG", ""))
        if not config:
            return None
        try:
            task = config["task"]
            return TfConfig(task["type"], int(task["index"]),
                            config["cluster"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError("TF_CONFIG needs task.type, task.index and "
                             "cluster: %r (%s: %s)" % (
                                 config, type(exc).__name__, exc)) from None

    @staticmethod
    def set_tf_config(task_type: str, task_id: int,
                      worker_hosts: Sequence[str],
                      ps_hosts: Optional[Sequence[str]] = None,
                      has_evaluator: bool = False) -> Dict[str, Any]:
        """Writes ``TF_CONFIG`` for tools that read it (hbcore itself does
        not need it), with HybridBackend's layout: the first worker host is
        the ``chief``; with ``has_evaluator`` (and more than one host) the
        second is the ``evaluator``; the rest are ``worker`` tasks. A
        ``"worker"`` task_id counts all of ``worker_hosts``: worker 0
        becomes ``chief`` 0, worker 1 ``evaluator`` 0 (with
        has_evaluator), and the others the ``worker`` task of their host.

        Args:
            task_type: this process's task: ``"chief"``, ``"worker"``,
                ``"ps"`` or ``"evaluator"``.
            task_id: this process's index within ``task_type`` (for
                ``"worker"``: the index of its host in ``worker_hosts``).
            worker_hosts: ``host:port`` of every worker; the first becomes
                the chief.
            ps_hosts: ``host:port`` of the parameter servers, if any.
            has_evaluator: make the second worker host an ``evaluator``.

        Returns:
            The dict written.

        Raises:
            ValueError: empty worker_hosts or an unknown task_type.
        """
        workers = list(worker_hosts)
        if not workers:
            raise ValueError("set_tf_config: worker_hosts is empty")
        if task_type not in ("chief", "worker", "ps", "evaluator"):
            raise ValueError("set_tf_config: task_type must be chief, "
                             "worker, ps or evaluator, got %r" % task_type)
        task: Dict[str, Any] = {"type": task_type, "index": int(task_id)}
        cluster: Dict[str, List[str]] = {"chief": workers[:1]}
        # Hosts before the plain workers: the chief, then the evaluator.
        skipped = 1
        if has_evaluator and len(workers) > 1:
            cluster["evaluator"] = workers[1:2]
            skipped = 2
        if workers[skipped:]:
            cluster["worker"] = workers[skipped:]
        if task_type == "worker":
            if task["index"] == 0 or len(workers) == 1:
                task = {"type": "chief", "index": 0}
            elif skipped == 2 and task["index"] == 1:
                task = {"type": "evaluator", "index": 0}
            else:
                task["index"] -= skipped
        if ps_hosts:
            cluster["ps"] = list(ps_hosts)
        config: Dict[str, Any] = {"cluster": cluster, "task": task}
        os.environ["TF_CONFIG"] = json.dumps(config)
        return config


context = Context.get()


@contextlib.contextmanager
def context_scope(**kwargs: Any) -> Iterator[Context]:
    """``hb.context_scope(**options)``: HybridBackend's options-only scope.

    Overrides options for the code inside, as ``hb.scope(**options)``
    does, but installs none of hb.scope's patches (optimizers and sessions
    created inside stay TensorFlow's own).

    Args:
      **kwargs: option values for the code inside.

    Returns:
      A context manager that yields ``hb.context``.

    Raises:
      ValueError: an unknown option or a value outside its domain.
      TypeError: a value of the wrong type.
    """
    with _options.scope(**kwargs):
        yield context
