"""The description of one job, and the rules it must satisfy.

Every entry point (hbrun, ``python -m hbcore.run``, a TF_CONFIG machine
and its ps/evaluator tasks, ``hbcore.run(fn)``, Spark, Ray) fills one
``JobSpec`` from its own arguments and hands it down: the supervisor
launches it, the elastic driver launches it once a generation with that
generation's hosts (as Horovod's ``horovod.run`` fills the settings
object that ``horovodrun`` uses).

The rules between settings (rank count against the host list, elastic
limits) are checked here, once, by ``rank_count`` and ``elastic_settings``.
An entry point passes a ``Naming``: how it spells each setting (hbrun's
``--min-np``, ``hbcore.run``'s ``min_np``, Horovod's ``min_num_proc``), so
one rule gives one message, in the caller's words.  A broken rule raises
``JobSettingError`` (a ValueError) whose ``name`` is the setting at fault.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from hbcore.launcher.hosts import Host, total_slots

# horovodrun's default --elastic-timeout, and its variable.
DEFAULT_ELASTIC_TIMEOUT_S = 600
ELASTIC_TIMEOUT_VAR = "HOROVOD_ELASTIC_TIMEOUT"


class JobSettingError(ValueError):
    """A setting that breaks a rule.

    Attributes:
        name: The setting at fault, as the entry point spells it
            (``--min-np``, ``min_np``, HOROVOD_ELASTIC_TIMEOUT).
    """

    def __init__(self, name: str, text: str) -> None:
        super().__init__(text)
        self.name = name


@dataclass(frozen=True)
class Naming:
    """How one entry point spells the settings the rules name.

    Attributes:
        np, min_np, max_np, hosts, hostfile, discovery, cooldown,
        reset_limit, timeout: The names of those settings.
        elastic_only: The settings that need an elastic job.
    """
    np: str
    min_np: str
    max_np: str
    hosts: str
    hostfile: str
    discovery: str
    cooldown: str
    reset_limit: str
    timeout: str
    elastic_only: Tuple[str, ...]

    def error(self, setting: str, text: str) -> JobSettingError:
        """The error of ``setting`` (a field name); ``text`` follows its
        name and may use the other names as ``{np}``, ``{hosts}``, ..."""
        name = getattr(self, setting)
        names = {f.name: getattr(self, f.name)
                 for f in dataclasses.fields(self)}
        return JobSettingError(name, name + text.format(**names))


HBRUN_NAMES = Naming(
    np="-np/--num-proc", min_np="--min-np", max_np="--max-np",
    hosts="-H/--hosts", hostfile="--hostfile",
    discovery="--host-discovery-script",
    cooldown="--blacklist-cooldown-range", reset_limit="--reset-limit",
    timeout="--elastic-timeout",
    elastic_only=("--slots-per-host", "--elastic-timeout", "--reset-limit",
                  "--blacklist-cooldown-range"))
RUN_FN_NAMES = Naming(
    np="np", min_np="min_np", max_np="max_np", hosts="hosts",
    hostfile="hostfile", discovery="host_discovery_script",
    cooldown="cooldown_range", reset_limit="reset_limit",
    timeout="elastic_timeout", elastic_only=("reset_limit", "cooldown_range"))
# Horovod's Spark and Ray elastic arguments.
HOROVOD_NAMES = dataclasses.replace(
    RUN_FN_NAMES, np="num_proc", min_np="min_num_proc",
    max_np="max_num_proc")


@dataclass(frozen=True)
class ElasticSettings:
    """The elastic limits of a job (hbrun's elastic flags).

    Attributes:
        np: Slots needed to start (``-np``).
        min_np: Slots needed to go on (``--min-np``, default ``np``).
        max_np: Most slots used (``--max-np``), or None: unbounded.
        discovery_script: ``--host-discovery-script``, or None.
        fixed_hosts: The ``-H``/``--hostfile`` hosts when there is no
            script (None: this host, ``np`` slots).
        slots_per_host: Slots of a discovered host printed without any.
        timeout_s: ``--elastic-timeout``.
        reset_limit: ``--reset-limit``, or None: unlimited.
        cooldown_range: ``--blacklist-cooldown-range``, or None.
    """
    np: int
    min_np: int
    max_np: Optional[int]
    discovery_script: Optional[str]
    fixed_hosts: Optional[List[Host]]
    slots_per_host: int
    timeout_s: float
    reset_limit: Optional[int]
    cooldown_range: Optional[Tuple[float, float]]


@dataclass
class JobSpec:
    """One job as every launch path runs it.

    Attributes:
        command: What each rank runs, e.g. ``["python", "train.py"]``.
        np: Number of ranks (of the first generation, for an elastic job).
        hosts: Hosts and slots, or None: this host.
        env: Variables set on every rank (HB_* settings), on top of
            ``environ``.
        per_rank_env: One dict of extra variables per rank, or None.
        mpi_args: Extra arguments for mpiexec.
        output_dir: Also write each rank's output to
            ``output_dir/rank.N/{stdout,stderr}``, or None.
        timestamp_output: Put the local time in front of every output
            line (``--prefix-output-with-timestamp``).
        verbose: Print the mpiexec command line first.
        environ: Environment of mpiexec and so of the ranks (None:
            os.environ); HB_MPIEXEC and PATH in it select the launcher.
        stdin: stdin of mpiexec (forwarded to rank 0); None: inherited.
        elastic: The elastic limits, or None: a fixed job.
        program: The name starting report lines.
    """
    command: List[str]
    np: int
    hosts: Optional[List[Host]] = None
    env: Dict[str, str] = field(default_factory=dict)
    per_rank_env: Optional[List[Dict[str, str]]] = None
    mpi_args: List[str] = field(default_factory=list)
    output_dir: Optional[str] = None
    timestamp_output: bool = False
    verbose: bool = False
    environ: Optional[Mapping[str, str]] = None
    stdin: Optional[int] = None
    elastic: Optional[ElasticSettings] = None
    program: str = "hbrun"


def _is_count(value: Any, least: int) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and value >= least)


def rank_count(names: Naming, np: Optional[int],
               hosts: Optional[List[Host]]) -> int:
    """The number of ranks: ``np``, else every slot of ``hosts``.

    Args:
        names: The caller's names of the settings.
        np: The ranks asked for, or None.
        hosts: The host list, or None: this host.

    Returns:
        The rank count.

    Raises:
        JobSettingError: If neither is given, ``np`` is not an integer
            >= 1, or the ranks do not fit in the hosts' slots.
    """
    if np is None:
        if hosts is None:
            raise names.error("np", " is required (or give {hosts} or "
                              "{hostfile})")
        return total_slots(hosts)
    if not _is_count(np, 1):
        raise names.error("np", " must be an integer >= 1, got %r" % (np,))
    if hosts is not None and np > total_slots(hosts):
        raise names.error("np", ": %d ranks do not fit in the %d slots of "
                          "the host list" % (np, total_slots(hosts)))
    return np


def is_elastic(min_np: Optional[int], max_np: Optional[int],
               discovery_script: Optional[str]) -> bool:
    """Whether a job is elastic: any of its elastic limits is given."""
    return not (min_np is None and max_np is None and discovery_script is None)


def elastic_settings(names: Naming, np: int, min_np: Optional[int],
                     max_np: Optional[int],
                     discovery_script: Optional[str],
                     hosts: Optional[List[Host]],
                     slots_per_host: Optional[int] = None,
                     reset_limit: Optional[int] = None,
                     cooldown_range: Optional[Tuple[float, float]] = None,
                     timeout_s: Optional[float] = None,
                     environ: Mapping[str, str] = {},
                     elastic_only_given: Sequence[str] = ()
                     ) -> Optional[ElasticSettings]:
    """The elastic limits of a job, or None for a fixed job.

    Args:
        names: The caller's names of the settings.
        np: Ranks to start with (``rank_count``'s answer).
        min_np: Fewest ranks to go on with (None: np).
        max_np: Most ranks (None: unbounded).
        discovery_script: The host discovery script (not with ``hosts``).
        hosts: The fixed hosts, or None.
        slots_per_host: Slots of a discovered host printed without any
            (None: 1).
        reset_limit: Most re-formations (None: unlimited).
        cooldown_range: Blacklist ``(MIN, MAX)`` seconds, or None.
        timeout_s: Seconds to wait for ``min_np`` slots (None:
            HOROVOD_ELASTIC_TIMEOUT in ``environ``, else 600).
        environ: Where HOROVOD_ELASTIC_TIMEOUT is read.
        elastic_only_given: Names (of ``names.elastic_only``) of the
            elastic-only settings the caller was given.

    Returns:
        The ElasticSettings, or None when no limit asks for an elastic job.

    Raises:
        JobSettingError: Naming the setting that breaks a rule.
    """
    if not is_elastic(min_np, max_np, discovery_script):
        if elastic_only_given:
            only = names.elastic_only
            listed = ", ".join(only[:-1]) + " and " + only[-1]
            raise JobSettingError(elastic_only_given[0], (
                "%s are for an elastic job: give %s, %s or %s"
                % (listed, names.min_np, names.max_np, names.discovery)))
        return None
    if discovery_script is not None and hosts is not None:
        raise names.error("discovery", ": not with {hosts} or {hostfile}")
    min_np = np if min_np is None else min_np
    for setting, value in (("min_np", min_np), ("np", np),
                           ("max_np", max_np)):
        if value is not None and not _is_count(value, 1):
            raise names.error(setting, " must be an integer >= 1, got %r"
                              % (value,))
    if min_np > np:
        raise names.error("min_np", " %d is more than {np} %d"
                          % (min_np, np))
    if max_np is not None and max_np < np:
        raise names.error("max_np", " %d is less than {np} %d"
                          % (max_np, np))
    if reset_limit is not None and not _is_count(reset_limit, 0):
        raise names.error("reset_limit", " must be an integer >= 0 or None, "
                          "got %r" % (reset_limit,))
    if cooldown_range is not None:
        low, high = cooldown_range
        if not 0 <= low <= high:
            raise names.error("cooldown", " must be (MIN, MAX) with "
                              "0 <= MIN <= MAX, got %r" % (cooldown_range,))
        cooldown_range = (float(low), float(high))
    if timeout_s is None:
        text = environ.get(ELASTIC_TIMEOUT_VAR,
                           str(DEFAULT_ELASTIC_TIMEOUT_S))
        if not text.isdigit() or int(text) < 1:
            raise JobSettingError(ELASTIC_TIMEOUT_VAR, (
                "%s must be an integer >= 1, got %r"
                % (ELASTIC_TIMEOUT_VAR, text)))
        timeout_s = int(text)
    elif isinstance(timeout_s, bool) or not isinstance(
            timeout_s, (int, float)) or not timeout_s > 0:
        raise names.error("timeout", " must be a positive number of "
                          "seconds, got %r" % (timeout_s,))
    return ElasticSettings(
        np=np, min_np=min_np, max_np=max_np,
        discovery_script=discovery_script, fixed_hosts=hosts,
        slots_per_host=slots_per_host or 1, timeout_s=timeout_s,
        reset_limit=reset_limit, cooldown_range=cooldown_range)
