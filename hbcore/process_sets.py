"""Process sets: subsets of the ranks that run collectives among themselves
(Horovod's ``hvd.ProcessSet``; one implementation for hbcore and
hbcore_tf).

    ps = hb.ProcessSet([0, 2])
    hb.init(process_sets=[ps])               # or, with HB_DYNAMIC_PROCESS_SETS=1,
    ps = hb.add_process_set([0, 2])          # collective over every rank
    if ps.included():
        y = hb.allreduce(x, process_set=ps)  # only ranks 0 and 2 take part

Each set is negotiated by the core on its own communicator with its own
response cache, in the one background thread; tensors fuse only within a
set. Ranks inside a set are set ranks (``ps.rank()``), but a broadcast's
``root_rank`` stays a global rank, as in Horovod. Adding and removing sets
after init needs ``HB_DYNAMIC_PROCESS_SETS=1`` (alias
``HOROVOD_DYNAMIC_PROCESS_SETS``), or ``init(process_sets="dynamic")``.
See docs/process_sets.md.
"""
from typing import Any, List, Optional, Sequence, Union

from hbcore._native import core
from hbcore.exceptions import initialized

_NOT_REGISTERED = "Process set does not exist or has not been registered."

# hbcore rank -> MPI_COMM_WORLD rank, for translating mpi4py communicators;
# None while the two agree (init over MPI_COMM_WORLD). Set by init().
_world_ranks: Optional[List[int]] = None


def _is_comm(obj: Any) -> bool:
    """Whether ``obj`` is an mpi4py communicator (without importing
    mpi4py when it is not loaded)."""
    return callable(getattr(obj, "py2f", None)) and callable(
        getattr(obj, "Get_group", None))


class ProcessSet:
    """A set of ranks that run collectives together.

    Construct it from a list of ranks or an mpi4py communicator, then pass
    it to :func:`hbcore.init` (``process_sets=[...]``) or to
    :func:`add_process_set`; once registered, ``process_set_id`` is set and
    the object can be passed as ``process_set=`` to every collective.

    Args:
        ranks_or_comm: the member ranks (any order; kept sorted), or an
            mpi4py communicator whose members form the set (on ranks outside
            it, ``MPI.COMM_NULL``, as ``Comm.Split`` gives them).

    Raises:
        ValueError: ``ranks_or_comm`` is neither a sequence of ints nor an
            mpi4py communicator (Horovod's type and message).
    """

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None
    mpi_comm: Any = None

    def __init__(self, ranks_or_comm: Union[Sequence[int], Any]) -> None:
        if _is_comm(ranks_or_comm):
            self.mpi_comm = ranks_or_comm
            return
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            ranks = None
        if ranks is None or any(not isinstance(r, int) or isinstance(r, bool)
                                for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of "
                             "process ranks or an mpi4py Comm object")
        self.ranks = ranks

    def _invalidate(self) -> None:
        self.process_set_id = None

    def _info(self) -> Optional[tuple]:
        if self.process_set_id is None:
            return None
        info = core.process_set_info(self.process_set_id)
        if info is None:
            raise ValueError(_NOT_REGISTERED)
        return info

    def size(self) -> Optional[int]:
        """Returns the number of ranks in the set, or None if the set is not
        registered.

        Raises:
            ValueError: the set was removed, or hbcore is not initialized.
        """
        info = self._info()
        return None if info is None else info[0]

    def rank(self) -> Optional[int]:
        """Returns this process's rank within the set (its index among the
        sorted members), or None if the set is not registered. Collectives
        still name a broadcast root by its global rank.

        Raises:
            ValueError: this process is not a member, or the set was
                removed.
        """
        info = self._info()
        if info is None:
            return None
        if info[1] < 0:
            raise ValueError("Process is not part of provided process set.")
        return info[1]

    def included(self) -> Optional[bool]:
        """Returns whether this process belongs to the set, or None while
        its ranks are unknown (a communicator set not yet registered)."""
        if self.ranks is None:
            return None
        return initialized(core.rank()) in self.ranks

    def __str__(self) -> str:
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def process_set_id(process_set: Optional[ProcessSet]) -> int:
    """The core's id of ``process_set``, for the collectives' ``process_set=``.

    Args:
        process_set: a registered ProcessSet; None means the global set.

    Returns:
        The set's id: 0 for the global set (or None).

    Raises:
        ValueError: the set was never registered (pass it to init or
            add_process_set first) or was removed, or its
            ``process_set_id`` names no set the runtime knows (as Horovod,
            when the collective is called, not when it runs).
        NotInitializedError: a non-global set while hbcore is not
            initialized.
    """
    if process_set is None or process_set is global_process_set:
        return 0
    set_id = getattr(process_set, "process_set_id", None)
    if set_id is None:
        raise ValueError(
            "%s is not registered: pass it to init(process_sets=[...]) or "
            "add_process_set() first (a removed set cannot be used)"
            % (process_set,))
    if core.process_set_info(int(set_id)) is None:
        raise ValueError("%s: no known process set with id %d"
                         % (process_set, int(set_id)))
    return int(set_id)


def process_set_by_id(set_id: int) -> ProcessSet:
    """A registered ProcessSet for ``set_id`` (the global set for 0).

    Used e.g. for the gradient of an op that recorded only the id.

    Args:
        set_id: the core's id of the set.

    Returns:
        ``global_process_set`` for 0; otherwise a new ProcessSet object
        with the set's ranks and ``process_set_id``.

    Raises:
        ValueError: no set has that id.
        NotInitializedError: ``set_id`` is not 0 and hbcore is not
            initialized.
    """
    if set_id == 0:
        return global_process_set
    info = core.process_set_info(int(set_id))
    if info is None:
        raise ValueError("No known process set with id %d" % set_id)
    ps = ProcessSet(info[2])
    ps.process_set_id = int(set_id)
    return ps


def _members(process_set: ProcessSet) -> List[int]:
    """The ranks to submit for ``process_set``: its ranks, or those of its
    communicator translated to hbcore ranks ([] where it is
    MPI_COMM_NULL: the core then takes the members from the ranks that
    know them)."""
    if process_set.ranks is not None:
        return list(process_set.ranks)
    from mpi4py import MPI

    comm = process_set.mpi_comm
    if comm == MPI.COMM_NULL:
        return []
    group = comm.Get_group()
    world = MPI.COMM_WORLD.Get_group()
    try:
        in_world = MPI.Group.Translate_ranks(group, list(range(group.size)),
                                             world)
    finally:
        group.Free()
        world.Free()
    if _world_ranks is None:
        return sorted(int(r) for r in in_world)
    index = {w: i for i, w in enumerate(_world_ranks)}
    missing = [w for w in in_world if w not in index]
    if missing:
        raise ValueError("the communicator of %s has MPI_COMM_WORLD ranks %s "
                         "that hbcore was not initialized over"
                         % (process_set, missing))
    return sorted(index[w] for w in in_world)


def _init_args(process_sets: Any) -> tuple:
    """(member lists for the core, whether dynamic sets were asked for) from
    init's ``process_sets`` argument."""
    if process_sets is None:
        return [], False
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("process_sets must be a list of ProcessSet or "
                             "'dynamic', not %r" % process_sets)
        return [], True
    sets = list(process_sets)
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise TypeError("process_sets must hold ProcessSet objects, not "
                            "%s" % type(ps).__name__)
    return [_members(ps) for ps in sets], False


def _register_init_sets(process_sets: Any) -> None:
    """After init: sets ids and ranks of the ProcessSet objects given to it
    (ids 1, 2, ... in order) and the global set's ranks."""
    global_process_set.ranks = list(core.process_set_info(0)[2])
    if process_sets is None or isinstance(process_sets, str):
        return
    table = {i: core.process_set_info(i) for i in core.process_set_ids()}
    by_ranks = {tuple(info[2]): i for i, info in table.items() if i != 0}
    for position, ps in enumerate(process_sets, start=1):
        set_id = (by_ranks.get(tuple(ps.ranks)) if ps.ranks is not None
                  else position if position in table else None)
        ps.process_set_id = set_id
        if set_id is not None and ps.ranks is None:
            ps.ranks = list(table[set_id][2])


def add_process_set(process_set: Union[ProcessSet, Sequence[int], Any]
                    ) -> ProcessSet:
    """Adds a process set after init and returns it, registered.

    Collective over every rank (members or not), called in the same order
    on all of them. Requires ``HB_DYNAMIC_PROCESS_SETS=1`` (alias
    ``HOROVOD_DYNAMIC_PROCESS_SETS``) or ``init(process_sets="dynamic")``.

    Args:
        process_set: a ProcessSet, a list of ranks, or an mpi4py
            communicator (``MPI.COMM_NULL`` on ranks outside it).

    Returns:
        The registered ProcessSet (the one given, or a new one).

    Raises:
        ValueError: an empty rank list, raised on every rank before
            anything collective (Horovod's "Attempted to add a duplicate
            process set": to Horovod no ranks means every rank, the global
            set). (InvalidArgumentError, also raised before anything
            collective:) dynamic process sets are not enabled ("Set
            HOROVOD_DYNAMIC_PROCESS_SETS=1 ..."); a set with the same ranks
            exists ("Attempted to add a duplicate process set"); a rank is
            out of range or repeated.
        MismatchError: ranks passed different members.
        NotInitializedError: before init.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.ranks is not None and not process_set.ranks:
        # Checked here, not by the core: a rank outside a communicator set
        # (MPI_COMM_NULL) legitimately sends no members, so an empty list
        # would reach the collective negotiation and fail there for all.
        raise ValueError(
            "Attempted to add a duplicate process set: %s: an empty rank "
            "list stands for every rank, the global process set, which "
            "always exists; list the member ranks" % (process_set,))
    set_id = core.add_process_set(_members(process_set))
    process_set.process_set_id = set_id
    if process_set.ranks is None:
        process_set.ranks = list(core.process_set_info(set_id)[2])
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Removes a process set; collective over every rank.

    Collectives still pending on it fail. Once the core answered, the
    object is invalidated (``process_set_id`` becomes None), also when the
    core no longer knew the set.

    Args:
        process_set: the set to remove (registered by init or
            add_process_set).

    Returns:
        True if it was removed; False for the global set, for a set that
        was never registered and for one already removed.

    Raises:
        ValueError: (InvalidArgumentError) dynamic process sets are not
            enabled ("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 ...").
        NotInitializedError: a registered set, but hbcore is not
            initialized.
    """
    set_id = process_set.process_set_id
    if set_id is None or set_id == 0:
        return False
    removed = core.remove_process_set(int(set_id))
    process_set._invalidate()
    return removed


def process_sets() -> List[ProcessSet]:
    """Returns a ProcessSet for each registered set, ascending by id (the
    global set first)."""
    out = []
    for set_id in core.process_set_ids():
        if set_id == 0:
            out.append(global_process_set)
            continue
        ps = ProcessSet(core.process_set_info(set_id)[2])
        ps.process_set_id = set_id
        out.append(ps)
    return out


def set_world_ranks(world_ranks: Optional[List[int]]) -> None:
    """Records which MPI_COMM_WORLD rank each hbcore rank is (init).

    Args:
        world_ranks: entry i is the MPI_COMM_WORLD rank of hbcore rank i;
            None when the two numberings agree.
    """
    global _world_ranks
    _world_ranks = world_ranks

