"""The runtime's configuration knobs, for the Python side.

The core's parser (csrc/core/src/common/config.cc) defines the knobs and exports
its table (``hbcore._native.core.knobs()``). This module mirrors that table
in pure Python because ``hbrun`` builds its tuning flags from it and must
start without loading the core; tests/test_knobs.py checks that the two
tables agree in every field, so a knob cannot be added, renamed or given
another default or range in one place only. What only the Python side
needs (help text, hbrun's flag) lives here alone.

Each knob is set, in this order of precedence, by ``hbcore.init(config=
{name: value})``, by its ``HB_*`` variable, or by the ``HOROVOD_*`` alias.
"""
import math
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

from hbcore.setting_values import parse_bool


class Flag(NamedTuple):
    """The hbrun / ``python -m hbcore.run`` flag that sets a knob.

    Attributes:
        option: the flag, e.g. ``--fusion-threshold-mb``.
        metavar: the value's name in ``--help``.
        scale: the knob's value is the flag's value times this (MiB -> bytes).
        positive: the flag also rejects 0 (which the knob accepts).
        const: for a switch that takes no value (as horovodrun's
            ``--hierarchical-allreduce``), the value it sets; None: the flag
            takes a value.
    """

    option: str
    metavar: str
    scale: float = 1.0
    positive: bool = False
    const: Optional[str] = None


class Knob(NamedTuple):
    """One configuration knob.

    Attributes:
        name: the key in ``hbcore.init(config=...)``.
        env: the environment variable (``HOROVOD_`` + ``env[3:]`` is its
            alias).
        type: ``"integer"``, ``"number"``, ``"string"``, ``"bool"``
            (setting_values' words), ``"log_level"`` or ``"choice"``
            (``auto`` or a bool).
        default: the default as text (``""``: unset).
        min, max: bounds of integers and numbers (``max`` may be inf).
        unit: what the value counts (``"bytes"``, ``"seconds"``, ...).
        help: one line for ``--help`` and the docs.
        flag: the launcher flag setting it, or None.
    """

    name: str
    env: str
    type: str
    default: str
    min: float
    max: float
    unit: str
    help: str
    flag: Optional[Flag] = None


LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")

KNOBS: Tuple[Knob, ...] = (
    Knob("fusion_threshold", "HB_FUSION_THRESHOLD", "integer", "134217728",
         0, 2 ** 40, "bytes",
         "largest fused allreduce buffer (0 disables fusion)",
         Flag("--fusion-threshold-mb", "MB", scale=1024 * 1024)),
    Knob("shm_allreduce_threshold", "HB_SHM_ALLREDUCE_THRESHOLD", "integer",
         "4194304", 0, 2 ** 30, "bytes",
         "single-host jobs: shared-memory allreduce piece size per rank "
         "(0 uses MPI)"),
    Knob("hierarchical_allreduce", "HB_HIERARCHICAL_ALLREDUCE", "choice",
         "auto", 0, 0, "choice",
         "jobs across hosts: allreduce within each host in shared memory, "
         "then between hosts (auto: when hosts run equal rank counts)",
         Flag("--hierarchical-allreduce", "CHOICE", const="1")),
    Knob("hierarchical_allgather", "HB_HIERARCHICAL_ALLGATHER", "choice",
         "auto", 0, 0, "choice",
         "jobs across hosts: allgather within each host, then between one "
         "leader per host (auto: when some host runs more than one rank)",
         Flag("--hierarchical-allgather", "CHOICE", const="1")),
    Knob("ring_allreduce", "HB_RING_ALLREDUCE", "choice", "auto", 0, 0,
         "choice",
         "allreduces MPI would carry go around a ring of point-to-point "
         "messages that hbcore reduces (auto: in jobs across hosts)"),
    Knob("cycle_time", "HB_CYCLE_TIME", "number", "1", 0, 10000,
         "milliseconds",
         "longest an idle background thread sleeps between checks for "
         "peers' work",
         Flag("--cycle-time-ms", "MS", positive=True)),
    Knob("idle_spin", "HB_IDLE_SPIN", "choice", "auto", 0, 0, "choice",
         "after each cycle the background thread watches its queue for "
         "100 us before sleeping (auto: when the host has 2 CPUs per "
         "local rank)"),
    Knob("bind_ranks", "HB_BIND_RANKS", "choice", "auto", 0, 0, "choice",
         "each rank binds its threads to CPUs of its own at init (auto: "
         "when the host runs one rank per CPU and nothing bound them)"),
    Knob("cache_capacity", "HB_CACHE_CAPACITY", "integer", "1024", 0,
         2 ** 20, "slots", "response cache entries (0 disables the cache)",
         Flag("--cache-capacity", "N")),
    Knob("fast_path_threshold", "HB_FAST_PATH_THRESHOLD", "integer", "8192",
         0, 65536, "bytes",
         "total payload of cached small Sum/Average CPU allreduces that "
         "travel with the negotiation's readiness bits, one round trip "
         "per cycle (0 disables)"),
    Knob("timeline", "HB_TIMELINE", "string", "", 0, 0, "path",
         "write a Chrome trace timeline to this file (rank 0; DYNAMIC: "
         "none until start_timeline)",
         Flag("--timeline-filename", "FILE")),
    Knob("timeline_mark_cycles", "HB_TIMELINE_MARK_CYCLES", "bool", "0", 0,
         0, "flag", "mark the start of each background cycle in the timeline",
         Flag("--timeline-mark-cycles", "", const="1")),
    Knob("stall_check_time_seconds", "HB_STALL_CHECK_TIME_SECONDS", "number",
         "60", 0, math.inf, "seconds",
         "warn about tensors only some ranks submitted after this long "
         "(0 disables)",
         Flag("--stall-check-warning-time-seconds", "S")),
    Knob("stall_check_disable", "HB_STALL_CHECK_DISABLE", "bool", "0", 0, 0,
         "flag", "disable the stall warnings"),
    Knob("stall_shutdown_time_seconds", "HB_STALL_SHUTDOWN_TIME_SECONDS",
         "number", "0", 0, math.inf, "seconds",
         "fail every rank when a tensor stalls this long, and kill a rank "
         "stopped or stuck in the kernel this long (0: never)",
         Flag("--stall-check-shutdown-time-seconds", "S")),
    Knob("log_level", "HB_LOG_LEVEL", "log_level", "WARNING", 0, 0, "level",
         "one of " + ", ".join(LOG_LEVELS),
         Flag("--log-level", "LEVEL")),
    Knob("dynamic_process_sets", "HB_DYNAMIC_PROCESS_SETS", "bool", "0", 0,
         0, "flag",
         "allow adding and removing process sets after init"),
    Knob("thread_affinity", "HB_THREAD_AFFINITY", "string", "", 0, 0, "cpus",
         "pin each rank's background thread: one CPU id per local rank, "
         "e.g. 0,1",
         Flag("--thread-affinity", "CPUS")),
    Knob("nccl_library", "HB_NCCL_LIBRARY", "string", "", 0, 0, "path",
         "NCCL library to load for GPU collectives (default: the "
         "nvidia-nccl-cu12 wheel, else libnccl.so.2)"),
    Knob("cuda_runtime_library", "HB_CUDA_RUNTIME_LIBRARY", "string", "", 0,
         0, "path",
         "CUDA runtime library to load for GPU collectives (default: the "
         "nvidia-cuda-runtime-cu12 wheel, else libcudart.so.12)"),
    Knob("ignore_tf_config", "HB_IGNORE_TF_CONFIG", "bool", "0", 0, 0,
         "flag",
         "skip init's check that a world of one is not a job that "
         "TF_CONFIG, Slurm or another MPI launcher says has several tasks"),
    Knob("pipeline_piece_bytes", "HB_PIPELINE_PIECE_BYTES", "integer", "0",
         0, 2 ** 40, "bytes",
         "largest piece of a fused allreduce the pipeline sends at once "
         "(0: the backend's own, 4 MiB on MPI)"),
    Knob("autotune", "HB_AUTOTUNE", "bool", "0", 0, 0, "flag",
         "tune fusion threshold, cycle time, response cache and the "
         "data-plane switches while the job trains (rank 0 decides)",
         Flag("--autotune", "", const="1")),
    Knob("autotune_log", "HB_AUTOTUNE_LOG", "string", "", 0, 0, "path",
         "write every autotune sample to this CSV file (rank 0)",
         Flag("--autotune-log-file", "FILE")),
    Knob("autotune_warmup_samples", "HB_AUTOTUNE_WARMUP_SAMPLES", "integer",
         "3", 0, 1000000, "samples",
         "autotune samples discarded before scoring",
         Flag("--autotune-warmup-samples", "N")),
    Knob("autotune_steps_per_sample", "HB_AUTOTUNE_STEPS_PER_SAMPLE",
         "integer", "10", 1, 1000000, "steps",
         "training steps in one autotune sample",
         Flag("--autotune-steps-per-sample", "N")),
    Knob("autotune_bayes_opt_max_samples", "HB_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
         "integer", "20", 1, 1000000, "samples",
         "scored autotune samples before the final choice",
         Flag("--autotune-bayes-opt-max-samples", "N")),
    Knob("autotune_gaussian_process_noise",
         "HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "number", "0.8", 0, math.inf,
         "noise", "autotune's Gaussian-process noise on normalised scores",
         Flag("--autotune-gaussian-process-noise", "NOISE")),
)

BY_NAME: Dict[str, Knob] = {k.name: k for k in KNOBS}


def env_flag(name: str, environ: Mapping[str, str]) -> bool:
    """A bool knob's value from the environment alone (``HB_*``, else the
    ``HOROVOD_*`` alias), for the launcher, which runs without the core; the
    same words the core's parser accepts.

    Args:
        name: The knob, e.g. ``"ignore_tf_config"``.
        environ: The environment to read.

    Returns:
        The value (the knob's default when neither variable is set).

    Raises:
        ValueError: The variable's value is not a bool
            (setting_values.parse_bool); the message names the variable.
    """
    knob = BY_NAME[name]
    assert knob.type == "bool", name
    for env in (knob.env, "HOROVOD_" + knob.env[3:]):
        text = environ.get(env, "")
        if text:
            return parse_bool(env, text)
    return parse_bool(knob.env, knob.default)


def value_text(name: str, value: object) -> str:
    """The text the core parses for a programmatic value of knob ``name``.

    Args:
        name: the knob (only used in messages).
        value: a bool, an integer or real number (numpy's too), a str or
            an os.PathLike.

    Returns:
        ``"true"``/``"false"`` for bools (so a bool never passes as the
        integer 1), ``str()`` of integers, ``repr()`` of reals (full
        precision), the path of path-likes, strings as they are.

    Raises:
        TypeError: the value has another type.
    """
    import numbers
    import os

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError("config[%r]: expected a bool, int, float or str, got %s"
                    % (name, type(value).__name__))
