"""Horovod's process-set names. hbcore runs every collective over all
ranks: the global process set exists (so ``process_set=`` arguments and
``hvd.global_process_set`` keep working); other sets are refused."""
from typing import Any, List, Optional, Sequence

import hbcore


class ProcessSet:
    """A set of ranks a collective runs over. Only the global set (all
    ranks, ``process_set_id`` 0) is supported.

    Args:
        ranks_or_comm: the ranks of the set; None for all ranks.
    """

    def __init__(self, ranks_or_comm: Optional[Sequence[int]] = None) -> None:
        self.ranks: Optional[List[int]] = (
            None if ranks_or_comm is None else [int(r) for r in ranks_or_comm])
        self.process_set_id: Optional[int] = 0 if self.ranks is None else None

    def size(self) -> int:
        """Returns the number of ranks in the set."""
        return hbcore.size() if self.ranks is None else len(self.ranks)

    def rank(self) -> int:
        """Returns this process's rank within the set."""
        return hbcore.rank() if self.ranks is None else self.ranks.index(
            hbcore.rank())

    def included(self) -> bool:
        """Returns whether this process belongs to the set."""
        return self.ranks is None or hbcore.rank() in self.ranks

    def __repr__(self) -> str:
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (
            self.process_set_id, "all" if self.ranks is None else self.ranks)


global_process_set = ProcessSet()


def is_global(process_set: Any) -> bool:
    """True for None, the global set, or a set listing every rank."""
    if process_set is None or process_set is global_process_set:
        return True
    if getattr(process_set, "process_set_id", None) == 0:
        return True
    ranks = getattr(process_set, "ranks", None)
    return ranks is not None and list(ranks) == list(range(hbcore.size()))


def check(process_set: Any) -> None:
    """Raises NotImplementedError unless ``process_set`` is the global set."""
    if not is_global(process_set):
        raise NotImplementedError(
            "hbcore runs collectives over all ranks; process sets other than "
            "the global one are not supported (got %r)" % (process_set,))


def add_process_set(process_set: Any) -> ProcessSet:
    """Not supported: hbcore has only the global process set.

    Raises:
        NotImplementedError: always, unless the set is the global one.
    """
    check(process_set if isinstance(process_set, ProcessSet)
          else ProcessSet(process_set))
    return global_process_set


def remove_process_set(process_set: Any) -> bool:
    """Returns False: the global process set cannot be removed."""
    return False
