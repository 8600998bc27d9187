"""``TF_CONFIG``: reading it strictly, and HybridBackend's order of tasks.

Kubernetes' TFJob, Alibaba PAI and most TensorFlow clusters start one
process per machine and give each a ``TF_CONFIG`` such as::

    {"cluster": {"chief": ["m0:2222"], "worker": ["m1:2222", "m2:2222"],
                 "ps": ["m3:2222"], "evaluator": ["m4:2222"]},
     "task": {"type": "worker", "index": 1}}

Training tasks (the members of the collective job) are the ``chief``
(TF 1's ``master`` is read as the same), then the ``worker`` tasks by
index: HybridBackend's order, and TensorFlow's (``multi_worker_util``:
chief is worker 0). ``ps`` and ``evaluator`` tasks take no part in the
collectives; HybridBackend runs them as single processes outside the
training world, and so does ``python -m hbcore.run``.

Pure standard library: read by ``hbcore.init()`` (the check of
hbcore/job_environment.py) and by the launcher, which must work without
the native core.
"""

import json
import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

# Task types that train (members of the collective job), in rank order.
TRAINING_TYPES = ("chief", "master", "worker")
# Task types that run outside the collective job.
SIDE_TYPES = ("ps", "evaluator")
KNOWN_TYPES = TRAINING_TYPES + SIDE_TYPES

# host:port, the host a name, IPv4 address or bracketed IPv6 address.
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_MAX_TASKS = 65536


class Task(NamedTuple):
    """One task of a cluster: its type and its index within that type."""
    type: str
    index: int

    def __str__(self) -> str:
        return "%s:%d" % (self.type, self.index)

    @classmethod
    def from_name(cls, name: str) -> "Task":
        """The task ``str(task)`` named (``"worker:1"``)."""
        kind, _, index = name.partition(":")
        return cls(kind, int(index))


class TfConfig(NamedTuple):
    """A parsed ``TF_CONFIG``.

    Attributes:
        cluster: task type -> the addresses of its tasks, in index order.
        task: this process's task.
    """
    cluster: Dict[str, List[str]]
    task: Task

    def address(self, task: Optional[Task] = None) -> str:
        """Returns the ``host:port`` of a task (default: this one)."""
        task = self.task if task is None else task
        return self.cluster[task.type][task.index]

    @property
    def training_tasks(self) -> List[Task]:
        """The training tasks in rank order (see the module docstring)."""
        return training_tasks(self.cluster)

    @property
    def trains(self) -> bool:
        """Whether this process's task is a training task."""
        return self.task.type in TRAINING_TYPES


def split_address(address: str) -> Tuple[str, int]:
    """Splits ``host:port`` (``[v6]:port`` for IPv6).

    Args:
        address: The address.

    Returns:
        (host without brackets, port).

    Raises:
        ValueError: Not ``host:port`` with a port from 1 to 65535.
    """
    match = _ADDRESS.match(address) if isinstance(address, str) else None
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise ValueError("%r is not a host:port address" % (address,))
    return match.group(1).strip("[]"), int(match.group(2))


def training_tasks(cluster: Mapping[str, List[str]]) -> List[Task]:
    """The training tasks of a cluster, in HybridBackend's rank order.

    Args:
        cluster: A validated cluster (``TfConfig.cluster``).

    Returns:
        Chief (or master) tasks, then worker tasks, each by index.
    """
    return [Task(kind, index) for kind in TRAINING_TYPES
            for index in range(len(cluster.get(kind, ())))]


def _cluster(value: object) -> Dict[str, List[str]]:
    if not isinstance(value, dict) or not value:
        raise ValueError("TF_CONFIG's cluster must be an object of task "
                         "type -> list of host:port, got %r" % (value,))
    cluster: Dict[str, List[str]] = {}
    for kind, addresses in value.items():
        if kind not in KNOWN_TYPES:
            raise ValueError("TF_CONFIG's cluster has an unknown task type "
                             "%r (known: %s)" % (kind, ", ".join(KNOWN_TYPES)))
        if (not isinstance(addresses, list)
                or not 0 < len(addresses) <= _MAX_TASKS):
            raise ValueError("TF_CONFIG's cluster[%r] must be a non-empty "
                             "list of host:port, got %r" % (kind, addresses))
        for address in addresses:
            try:
                split_address(address)
            except ValueError as exc:
                raise ValueError("TF_CONFIG's cluster[%r]: %s"
                                 % (kind, exc)) from None
        cluster[kind] = list(addresses)
    if "chief" in cluster and "master" in cluster:
        raise ValueError("TF_CONFIG's cluster has both a chief and a master "
                         "(they are the same task)")
    if len(cluster.get("chief", cluster.get("master", ()))) > 1:
        raise ValueError("TF_CONFIG's cluster has more than one chief: %r"
                         % cluster.get("chief", cluster.get("master")))
    return cluster


def load(text: str) -> Optional[object]:
    """Decodes a ``TF_CONFIG`` value's JSON, unchecked.

    Args:
        text: The variable's value.

    Returns:
        The decoded value, or None when ``text`` is empty or an empty
        object (no cluster, as HybridBackend reads it).

    Raises:
        ValueError: Not JSON.
    """
    if not text.strip():
        return None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ValueError("TF_CONFIG is not valid JSON: %s" % exc) from None
    return None if config == {} else config


def parse(text: str) -> Optional[TfConfig]:
    """Parses and validates a ``TF_CONFIG`` value.

    Args:
        text: The variable's value.

    Returns:
        The TfConfig, or None when ``text`` is empty or ``{}`` (no cluster,
        as HybridBackend reads it).

    Raises:
        ValueError: Not JSON, or not a cluster and a task of it; the
            message says what is wrong.
    """
    config = load(text)
    if config is None:
        return None
    if not isinstance(config, dict) or "cluster" not in config \
            or "task" not in config:
        raise ValueError("TF_CONFIG needs a cluster and a task, got %r"
                         % (config,))
    cluster = _cluster(config["cluster"])
    task = config["task"]
    if not isinstance(task, dict) or "type" not in task:
        raise ValueError("TF_CONFIG's task needs a type and an index, got %r"
                         % (task,))
    kind, index = task["type"], task.get("index", 0)
    if isinstance(index, str) and index.isdigit():
        index = int(index)
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError("TF_CONFIG's task index must be an integer, got %r"
                         % (index,))
    if kind not in cluster or not 0 <= index < len(cluster[kind]):
        raise ValueError("TF_CONFIG's task %s:%s is not in its cluster %s"
                         % (kind, index, json.dumps(cluster, sort_keys=True)))
    return TfConfig(cluster, Task(kind, index))
