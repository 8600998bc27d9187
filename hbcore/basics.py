"""Process-level API: init, shutdown, topology and build facts."""
import atexit
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from hbcore import _gpu_libs
from hbcore import process_sets as process_sets_module
from hbcore._native import MPI_LIBRARY, core
from hbcore.autotune import runner as autotune_runner
from hbcore.exceptions import (InvalidArgumentError, WorldMismatchError,
                               initialized)
from hbcore.job_environment import lone_process_problem
from hbcore.knobs import value_text


# Knob values that a library set up before init() (DistributedOptimizer's
# bucket_cap_mb): the next init() applies them beneath its own ``config``.
# Set only through defer_config, which validates them.
_deferred: Dict[str, str] = {}


def _config_entries(config: Optional[Mapping[str, Any]]
                    ) -> List[Tuple[str, str]]:
    """(name, value text) pairs for the core; None values are left out."""
    if config is None:
        return []
    if not isinstance(config, Mapping):
        raise TypeError("config must be a mapping of knob name to value, "
                        "not %s" % type(config).__name__)
    entries = []
    for name, value in config.items():
        if not isinstance(name, str):
            raise TypeError("config keys are knob names (str), got %r"
                            % (name,))
        if value is not None:
            entries.append((name, value_text(name, value)))
    return entries


def check_config(config: Mapping[str, Any]) -> None:
    """Validates knob values with the core's parser, without init and
    without reading the environment.

    Args:
        config: knob name (see :data:`hbcore.knobs.KNOBS`, e.g.
            ``"fusion_threshold"``) -> value.

    Raises:
        TypeError: ``config`` is not a mapping, or a value has a type no
            knob takes.
        ConfigError: an unknown name, or a value the knob does not accept;
            the message names the knob and its variable.
    """
    core.check_config(_config_entries(config))


def defer_config(config: Mapping[str, Any]) -> None:
    """Validates knob values and has the next :func:`init` apply them, under
    the values passed to that init's ``config`` and over the environment.
    For libraries that configure the runtime before the user calls init
    (``DistributedOptimizer(bucket_cap_mb=...)``); nothing is written to
    ``os.environ``.

    Args:
        config: knob name -> value; a None value removes an earlier one.

    Raises:
        TypeError, ConfigError: as :func:`check_config`.
    """
    check_config(config)
    for name, value in config.items():
        if value is None:
            _deferred.pop(name, None)
        else:
            _deferred[name] = value_text(name, value)


def init(comm: Optional[Any] = None, process_sets: Optional[Any] = None,
         config: Optional[Mapping[str, Any]] = None) -> None:
    """Starts the runtime of this process: MPI (if nobody did), the private
    communicator and the background thread. Idempotent: until this rank
    calls :func:`shutdown`, further calls return at once, whatever ``comm``
    and ``config`` they pass. That holds too once a peer's shutdown (or a
    stall shutdown) stopped the runtime, as in Horovod: operations then keep
    raising :class:`~hbcore.exceptions.ShutdownError`, and a new runtime
    needs ``shutdown()`` then ``init()`` on every rank.

    Args:
        comm: the processes to run over, as in Horovod. None: every rank of
            MPI_COMM_WORLD. An mpi4py communicator (``Intracomm``): its
            ranks; hbcore works on its own duplicate, so user code may go on
            using or free the one passed. A list of ranks of
            MPI_COMM_WORLD: those ranks, in that order (this rank must be
            one of them; only they call init with this list).
        process_sets: as in Horovod: None; a list of
            :class:`~hbcore.ProcessSet` (the same list on every rank; built
            from ranks, or from mpi4py communicators that are
            ``MPI.COMM_NULL`` on non-members), registered with ids 1, 2, ...
            in order besides the global set; or ``"dynamic"``, which
            enables :func:`~hbcore.add_process_set` after init (as
            ``HB_DYNAMIC_PROCESS_SETS=1`` does, without touching
            ``os.environ``).
        config: knob name -> value, e.g. ``{"fusion_threshold": 1 << 20,
            "cycle_time": 0.5, "timeline": "tl.json"}``
            (:data:`hbcore.knobs.KNOBS` lists the names). These override the
            HB_* / HOROVOD_* variables; a None value leaves a knob to them.
            ``nccl_library`` / ``cuda_runtime_library`` not set here nor
            by a variable default to the nvidia-nccl-cu12 /
            nvidia-cuda-runtime-cu12 wheels when installed (see
            hbcore._gpu_libs); GPU support is optional, and a runtime that
            cannot load it serves host buffers as before.
            The core validates them with the same parser as the
            environment. Knobs that must agree across ranks (fusion and
            shared-memory thresholds, cache capacity) are checked at init.

    Raises:
        TypeError: ``comm`` is neither None, a list of ranks nor an mpi4py
            communicator; or ``config`` is not a mapping of str to values.
        ValueError: a rank in the list is out of range or repeated, or this
            rank is not in it; a process set is invalid or a duplicate
            (then the runtime is shut down again on every rank).
        InvalidArgumentError: the communicator is MPI_COMM_NULL or an
            intercommunicator.
        ConfigError: a ``config`` entry or an HB_* / HOROVOD_* variable has
            an invalid value, or a ``config`` name is unknown.
        InternalError: MPI could not be initialised.
        WorldMismatchError: the world has one rank but ``TF_CONFIG``, Slurm
            or another MPI launcher's variables say the job has several
            (each process would train apart); the runtime is shut down
            again. ``HB_IGNORE_TF_CONFIG=1`` skips the check.
    """
    if core.is_initialized():
        # Before anything collective: building the ranks' communicator of
        # ``comm=[...]`` would wait for ranks that do not call init again.
        return
    entries = dict(_deferred)
    entries.update(_config_entries(config))
    # NCCL and the CUDA runtime from the pip wheels, for each library the
    # user did not choose (config, HB_* or HOROVOD_* variable).
    entries.update(_gpu_libs.init_overrides(entries))
    if comm is not None and not isinstance(comm, (list, tuple, range)) and \
            not callable(getattr(comm, "py2f", None)):
        raise TypeError("init(comm=...) takes None, a list of ranks or an "
                        "mpi4py communicator, not %s" % type(comm).__name__)
    try:
        world_ranks = _world_ranks_of(comm)
    except Exception:  # e.g. MPI_COMM_NULL: core.init names the problem
        world_ranks = None
    process_sets_module.set_world_ranks(world_ranks)
    set_members, dynamic = process_sets_module._init_args(process_sets)
    if dynamic:
        entries["dynamic_process_sets"] = "true"
    overrides = sorted(entries.items())
    if comm is None:
        core.init(core.HB_COMM_WORLD, overrides, set_members)
    elif isinstance(comm, (list, tuple, range)):
        sub = _communicator_of_ranks(comm)
        try:
            core.init(sub.py2f(), overrides, set_members)
        finally:
            sub.Free()
    else:
        core.init(comm.py2f(), overrides, set_members)
    if comm is None:  # a communicator the user chose may well be one rank
        _check_not_alone()
    process_sets_module._register_init_sets(process_sets)
    _start_autotune()
    # Registered (again) last, so it runs before the atexit handler of any
    # library imported earlier that might finalise MPI (mpi4py).
    atexit.unregister(_shutdown_at_exit)
    atexit.register(_shutdown_at_exit)
    if not isinstance(sys.excepthook, _ExitOnUncaught):
        sys.excepthook = _ExitOnUncaught(sys.excepthook)


def _start_autotune() -> None:
    """Starts rank 0's tuner when HB_AUTOTUNE=1 (hbcore.autotune.runner);
    without its library every rank shuts the runtime down and raises, so
    no rank is left waiting."""
    try:
        autotune_runner.start()
    except ImportError:
        core.shutdown()
        raise


def _check_not_alone() -> None:
    """Raises WorldMismatchError (after shutting the runtime down) when this
    world of one is part of a larger job (see hbcore/job_environment.py).
    The switch is read from the runtime's parsed configuration, so
    ``HB_IGNORE_TF_CONFIG``, its ``HOROVOD_`` alias and ``init(config=
    {"ignore_tf_config": True})`` all count, validated like any knob."""
    if core.size() != 1:
        return
    if "HB_IGNORE_TF_CONFIG=1" in core.config_string().splitlines():
        return
    problem = lone_process_problem(os.environ)
    if problem:
        core.shutdown()
        raise WorldMismatchError("hbcore.init(): " + problem)


def _world_ranks_of(comm: Any) -> Optional[List[int]]:
    """hbcore rank -> MPI_COMM_WORLD rank for init's ``comm``; None when
    they agree (``comm`` is None: mpi4py need not be loaded)."""
    if comm is None:
        return None
    if isinstance(comm, (list, tuple, range)):
        return [int(r) for r in comm]
    from mpi4py import MPI

    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return [int(r) for r in MPI.Group.Translate_ranks(
            group, list(range(group.size)), world)]
    finally:
        group.Free()
        world.Free()


def _communicator_of_ranks(ranks: Sequence[int]) -> Any:
    """An mpi4py communicator of the given MPI_COMM_WORLD ranks (collective
    over those ranks only)."""
    from mpi4py import MPI  # initialises MPI (thread level: multiple)

    world = MPI.COMM_WORLD
    ranks = list(ranks)
    for r in ranks:
        if not isinstance(r, (int, np.integer)) or not 0 <= r < world.size:
            raise ValueError("init(comm=%r): rank %r is not a rank of "
                             "MPI_COMM_WORLD (size %d)" % (ranks, r, world.size))
    if len(set(ranks)) != len(ranks):
        raise ValueError("init(comm=%r): a rank appears more than once"
                         % (ranks,))
    if world.rank not in ranks:
        raise ValueError("init(comm=%r): this process (rank %d of "
                         "MPI_COMM_WORLD) is not in the list" % (ranks,
                                                                 world.rank))
    group = world.Get_group().Incl([int(r) for r in ranks])
    try:
        return world.Create_group(group)
    finally:
        group.Free()


def shutdown() -> None:
    """Stops the runtime. Pending operations on every rank fail with
    :class:`~hbcore.exceptions.ShutdownError` naming this rank. Idempotent;
    ``init()`` may be called again afterwards."""
    core.shutdown()
    autotune_runner.join()


def is_initialized() -> bool:
    """Returns whether ``init()`` has been called (and not shut down)."""
    return core.is_initialized()


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Starts recording a Chrome-trace timeline into ``file_path`` (as
    Horovod's ``hvd.start_timeline``): rank 0 writes it, from the next
    operation on; other ranks record nothing. Calling it again switches to
    the new file (the previous one is finished). Works whatever
    ``HB_TIMELINE`` is set to (Horovod needs ``HOROVOD_TIMELINE=DYNAMIC``;
    hbcore accepts that value and then starts without a file).

    Args:
        file_path: the timeline file (truncated).
        mark_cycles: also mark the start of each background cycle
            (``CYCLE_START``), as ``HB_TIMELINE_MARK_CYCLES``.

    Raises:
        NotInitializedError: before ``init()`` (a ValueError, as Horovod's).
        InvalidArgumentError: ``file_path`` is empty.
        ConfigError: rank 0 cannot open the file.
    """
    if not isinstance(file_path, (str, os.PathLike)):
        raise InvalidArgumentError(
            "start_timeline: file_path must be a path, got %r" % (file_path,))
    core.start_timeline(os.fspath(file_path), bool(mark_cycles))


def stop_timeline() -> None:
    """Stops recording the timeline and finishes its file (valid JSON);
    does nothing when no timeline is being recorded.

    Raises:
        NotInitializedError: before ``init()``.
    """
    core.stop_timeline()


def rank() -> int:
    """Returns this process's rank in [0, size()).

    Raises:
        NotInitializedError: before ``init()``.
    """
    return initialized(core.rank())


def size() -> int:
    """Returns the number of processes in the job."""
    return initialized(core.size())


def local_rank() -> int:
    """Returns this process's rank among the processes on its host."""
    return initialized(core.local_rank())


def local_size() -> int:
    """Returns the number of processes on this host."""
    return initialized(core.local_size())


def cross_rank() -> int:
    """Returns the index of this host among hosts (the rank in the
    communicator of processes with the same local rank)."""
    return initialized(core.cross_rank())


def cross_size() -> int:
    """Returns the number of processes with this process's local rank."""
    return initialized(core.cross_size())


def is_homogeneous() -> bool:
    """Returns whether every host runs the same number of ranks (as
    Horovod's ``is_homogeneous``; a single-host job is).

    Raises:
        NotInitializedError: before ``init()``.
    """
    return bool(initialized(core.is_homogeneous()))


def mpi_threads_supported() -> bool:
    """Returns whether MPI runs with MPI_THREAD_MULTIPLE."""
    return bool(initialized(core.mpi_threads_supported()))


def nccl_built() -> bool:
    """Returns whether GPU buffers can be served through NCCL.

    After ``init()``: whether this process's runtime loaded NCCL and the
    CUDA runtime. Before: whether both would load (the libraries
    :func:`hbcore.gpu_info` describes, with the reason when not).
    """
    from hbcore.gpu_probe import nccl_available

    return nccl_available()


def build_info() -> Dict[str, object]:
    """Returns what was built and found, for ``hbrun --check-build``.

    Returns:
        Facts by name: versions and paths of the core, MPI and the TF op
        library; ``nccl_built`` (see :func:`nccl_built`) and ``gpu`` (the
        dict of :func:`hbcore.gpu_info`).
    """
    import hbcore
    from hbcore.tf_probe import probe

    # Asked in a child process unless TensorFlow is loaded here already,
    # so that TensorFlow's start-up log does not land in our output.
    tf_info = probe()
    if tf_info.get("error"):
        tf_ops = "unavailable: %s" % tf_info["error"]
    else:
        tf_ops = (tf_info.get("tf_op_library") or
                  "not built yet (built at first import of hbcore_tf)")
    from hbcore.gpu_probe import gpu_info

    return {
        "tf_op_library": tf_ops,
        "version": core.version(),
        "core_library": core.__file__,
        "mpi_library": MPI_LIBRARY,
        "mpi_library_version": core.mpi_library_version(),
        "nccl_built": nccl_built(),
        "gpu": gpu_info(),
        "package_dir": hbcore.__path__[0],
    }


class _ExitOnUncaught:
    """Ends the process after an uncaught exception, once its traceback is
    printed and the peers are told (they fail fast naming this rank).

    Without it, a failed rank can hang forever in interpreter teardown:
    MPI_Finalize (mpi4py's atexit) waits for peers that are blocked in a
    collective this rank will never join, so no launcher sees it exit. The
    price: atexit handlers registered by others do not run on this path.
    """

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, kind, value, traceback) -> None:
        self.previous(kind, value, traceback)
        exit_without_finalize(1)


def exit_without_finalize(code: int) -> None:
    """Ends the process at once with ``code``, without MPI_Finalize.

    The runtime is shut down first (peers that still run learn it) and
    stdout/stderr are flushed; then ``os._exit``.  For a rank whose peers
    may never finalize (one failed, died or hangs): MPI_Finalize would
    wait for them in a PMI barrier forever, so no launcher would see this
    rank exit.  atexit handlers registered by others do not run.

    Args:
        code: The exit code.
    """
    try:
        _shutdown_at_exit()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed stream must not block exit
                pass
        os._exit(code)


def _shutdown_at_exit() -> None:
    # A process that exits without shutdown() still tells its peers, so they
    # fail fast with a message naming this rank instead of hanging.
    if core.is_initialized():
        core.shutdown()
