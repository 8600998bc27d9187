"""Horovod's elastic state objects over hbcore's per-host store.

Cross-rank contract: every rank creates the same state objects in the
same order and calls commit / check_host_updates / sync at the same
points of its program (each holds one collective).

- ``commit()``: ``save()``, then ``check_host_updates()``.
- ``save()``: a Snapshot of the state's replicated values (snapshot.py:
  one memcpy per array, into the previous commit's buffers) is the
  in-memory commit; in an elastic job it goes to this host's store under
  the next commit number, written by the host's first slot only (the
  values are alike on every rank).  A state with per-rank parts (sharded
  rows: ``_part_payload``) also writes its part there and sends it to its
  buddy on another host (replicas.py), which writes it to its own host's
  store.  The writes are done when save() returns (store.py says why not
  in the background).
- ``check_host_updates()``: the agreement, one allreduce (Max) of two
  int64: what rank 0 learnt of host changes (0 nothing, 1 hosts added,
  2 hosts only removed; a non-blocking poll of its connection to the
  driver: hbcore/launcher/elastic/notice.py; the other ranks give 0), and
  minus this rank's last commit.  Every rank raises
  HostsUpdatedInterrupt from the same call, ``skip_sync`` True for 2.
  Every rank enters it after writing its files, so when it returns, the
  smallest last commit of the ranks (the second value) is whole on every
  host, and this host's older commits are removed (store.py's prune
  rule).
- ``sync()``: 1. every rank lists the files its host holds; 2. the lists
  are all-gathered; 3. the newest commit that is whole among the live
  hosts is chosen (its replicated values somewhere and, for a state with
  parts, every part of one world size); 4. the lowest rank holding the
  values broadcasts them, and for each part the lowest rank holding it
  broadcasts it, every rank keeping the rows it holds now (reshard.py);
  5. every rank writes the commit again in the new world's layout (so a
  new host holds it too, and each part has its second copy); a host that
  listed the replicated values' file in 1. keeps it unwritten.  With no
  commit anywhere (a fresh job) rank 0's current values are broadcast, as
  Horovod does, and each rank keeps its own parts; with commits but none
  whole (two hosts lost at once) sync raises RuntimeError rather than
  start over.
- ``restore()``: back to the last commit this process made or received.
Outside an elastic job (no HB_ELASTIC_STORE) the objects behave as
Horovod's, in memory only.
"""

import os
from typing import (Any, Callable, Dict, Iterable, List, Optional, Sequence,
                    Set, Tuple)

import numpy as np

from hbcore.basics import rank as hb_rank
from hbcore.basics import size as hb_size
from hbcore import ops
from hbcore.elastic import replicas, reshard
from hbcore.elastic.snapshot import Snapshot
from hbcore.elastic.store import Entry, Store
from hbcore.exceptions import HostsUpdatedInterrupt
from hbcore.launcher.elastic import notice as elastic_notice
from hbcore.objects import allgather_object, broadcast_object

# Creation counters per class: the store key of each state object.
_CREATED: Dict[str, int] = {}


class State:
    """Horovod's ``State``: what an elastic job keeps across resets.

    Args:
        bcast_object: Broadcasts a Python object from rank 0 (called as
            ``bcast_object(obj)``, or ``bcast_object(obj, root_rank=r)``
            to broadcast from the rank holding the newest commit);
            default ``hbcore.broadcast_object``.
        get_rank: Returns this rank; default ``hbcore.rank``.
    """

    def __init__(self, bcast_object: Optional[Callable] = None,
                 get_rank: Optional[Callable[[], int]] = None) -> None:
        self._bcast_object = bcast_object or broadcast_object
        self._rank = get_rank or hb_rank
        self._reset_callbacks: List[Callable[[], None]] = []
        name = type(self).__name__
        self._key = "%s%d" % (name, _CREATED.get(name, 0))
        _CREATED[name] = _CREATED.get(name, 0) + 1
        self._commit = -1
        self._store: Optional[Store] = None

    def _elastic_store(self) -> Optional[Store]:
        # Made on first use: the rank is known only after hbcore.init().
        if self._store is None:
            self._store = Store.from_env(self._rank())
        return self._store

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]
                                 ) -> None:
        """Adds functions to call after each reset (hosts added or removed,
        or a rank lost), before the state is synchronised.

        Args:
            callbacks: Functions of no argument.
        """
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        """Runs ``reset()`` and then the reset callbacks."""
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (to this host's store in an elastic job), then
        checks for host changes.

        Raises:
            HostsUpdatedInterrupt: On every rank, when the hosts changed.
        """
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raises HostsUpdatedInterrupt on every rank if hbrun reported a
        host change (see the module comment).

        Raises:
            HostsUpdatedInterrupt: ``skip_sync`` True when hosts were
                only removed, as Horovod's (the next world, of new
                processes, synchronises all the same).
        """
        store = self._elastic_store()
        if store is None:
            return
        address = os.environ.get(elastic_notice.NOTICE_VAR)
        seen = elastic_notice.NO_CHANGE
        if address and self._rank() == 0:
            seen = elastic_notice.hosts_updated(
                address, store.generation,
                os.environ.get(elastic_notice.KEY_VAR, ""))
        agreed = ops.allreduce(np.array([seen, -self._commit],
                                        np.int64),
                               op=ops.Max, name="elastic.agree." + self._key)
        # -agreed[1]: the oldest last commit of any rank, whole everywhere.
        store.prune(self._key, -int(agreed[1]))
        if agreed[0]:
            raise HostsUpdatedInterrupt(
                int(agreed[0]) == elastic_notice.REMOVED)

    def save(self) -> None:
        """Saves the state as the new commit."""
        self._commit += 1
        store = self._elastic_store()
        if store is not None:
            self._write(store, self._payload(), self._part_payload())

    def _write(self, store: Store, payload: Optional[Sequence[Any]],
               part: Optional[bytes]) -> None:
        """Writes commit ``self._commit`` (module comment, ``save``);
        ``payload``: the replicated values' bytes, in chunks, or None when
        this host holds them already.  Nothing is removed here: only an
        agreement proves a newer commit whole."""
        key, commit = self._key, self._commit
        if store.writes_replicated and payload is not None:
            store.write(key, commit, payload)
        if part is not None:
            rank, size = self._rank(), hb_size()
            store.write(key, commit, [part], size, rank)
            for sender, data in replicas.exchange(
                    part, store.hosts, rank, name="elastic.replica." + key):
                store.write(key, commit, [data], size, sender)

    def sync(self) -> None:
        """Brings every rank to the newest commit (module comment)."""
        store = self._elastic_store()
        held = sorted(store.entries(self._key)) if store is not None else []
        everyone = [{tuple(entry) for entry in files} for files in
                    allgather_object(held, name="elastic.sync.held")]
        chosen = newest_whole(everyone, self._has_parts)
        if chosen is None and any(everyone):
            raise RuntimeError(
                "hbcore.elastic: no commit of %s is whole on the hosts left "
                "(%d live ranks hold commits %s): more than one host that "
                "held it was lost" % (self._key, len(everyone), sorted(
                    {entry[0] for files in everyone for entry in files})))
        if chosen is None:
            payload = (b"".join(self._payload()) if self._rank() == 0
                       else None)
            self._load(self._bcast(payload, 0))
            return
        commit, parts = chosen
        rank = self._rank()

        def from_holder(entry: Entry) -> Any:
            holder = min(r for r, files in enumerate(everyone)
                         if entry in files)
            mine = store.read(self._key, *entry) if rank == holder else None
            return self._bcast(mine, holder)

        self._load(from_holder((commit, 0, 0)))
        if parts:
            self._load_parts(from_holder((commit, parts, p))
                             for p in range(parts))
        self._commit = commit
        if store is not None:
            # A host that listed the commit's replicated file holds it
            # whole (an agreement proved it before the world ended); only
            # the others write it.  Parts are always written: their
            # exchange is collective.
            held_here = (commit, 0, 0) in everyone[rank]
            self._write(store, None if held_here else self._payload(),
                        self._part_payload())

    def _bcast(self, payload: bytes, root: int) -> bytes:
        if root == 0:
            return self._bcast_object(payload)
        return self._bcast_object(payload, root_rank=root)

    def restore(self) -> None:
        """Undoes what was changed since the last commit."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Rebuilds what depends on the world after a reset (before sync)."""

    def _payload(self) -> Sequence[Any]:
        """The committed replicated state as bytes, in chunks."""
        raise NotImplementedError()

    # Whether the state has per-rank parts (subclasses with sharded rows).
    _has_parts = False

    def _part_payload(self) -> Optional[bytes]:
        """This rank's committed part, or None (no per-rank state)."""
        return None

    def _load_parts(self, parts: Iterable[bytes]) -> None:
        """Makes the committed parts of an old world (given one at a time,
        in rank order) this rank's committed and current part."""

    def _load(self, payload: bytes) -> None:
        """Makes ``payload`` (the chunks of a ``_payload``, joined) the
        committed and current state."""
        raise NotImplementedError()


def newest_whole(held: Sequence[Iterable[Entry]], has_parts: bool
                 ) -> Optional[Tuple[int, int]]:
    """The newest commit that the live ranks hold whole.

    Args:
        held: Per rank, the (commit, parts, part) entries of its host
            (store.py; parts 0 is the replicated values).
        has_parts: Whether the state has per-rank parts.

    Returns:
        ``(commit, parts)`` (parts 0 without per-rank parts), or None.
    """
    entries: Set[Entry] = {tuple(entry) for files in held
                           for entry in files}  # type: ignore[misc]
    for commit in sorted({c for c, _, _ in entries}, reverse=True):
        if (commit, 0, 0) not in entries:
            continue
        if not has_parts:
            return commit, 0
        for parts in sorted({n for c, n, _ in entries if c == commit and n}):
            if all((commit, parts, p) in entries for p in range(parts)):
                return commit, parts
    return None


class ObjectState(State):
    """Horovod's ``ObjectState``: picklable Python values as attributes.

    Args:
        bcast_object: As State's.
        get_rank: As State's.
        **kwargs: The values to keep, each readable and writable as an
            attribute of the same name.
    """

    def __init__(self, bcast_object: Optional[Callable] = None,
                 get_rank: Optional[Callable[[], int]] = None,
                 **kwargs: Any) -> None:
        # The commit is a Snapshot (snapshot.py): its one memcpy per array
        # is both the copy (later in-place changes of an attribute never
        # reach it) and the store's payload.
        self._names = list(kwargs)
        self._saved = Snapshot.take(*self._capture(dict(kwargs)))
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def _capture(self, values: Dict[str, Any]
                 ) -> Tuple[Any, Sequence[Any]]:
        """What a commit snapshots, given the attribute values, and the
        arrays in it that the snapshot may keep uncopied (a subclass adds
        to the value; ``_apply`` takes it back)."""
        return values, ()

    def save(self) -> None:
        """Makes the current attribute values the commit (copied)."""
        value, owned = self._capture({name: getattr(self, name)
                                      for name in self._names})
        self._saved = Snapshot.take(value, owned=owned, reuse=self._saved)
        super().save()

    def restore(self) -> None:
        """Sets the attributes back to the last commit."""
        self._set_attrs()

    def _payload(self) -> Sequence[Any]:
        return self._saved.chunks()

    def _load(self, payload: bytes) -> None:
        self._saved = Snapshot.from_bytes(payload)
        self._set_attrs()

    def _set_attrs(self) -> None:
        # Fresh copies each time, so changing an attribute in place (a
        # list, an array) never changes the commit.
        self._apply(self._saved.value())

    def _apply(self, value: Any) -> None:
        """Makes a copy of the committed value the current one."""
        for name, item in value.items():
            setattr(self, name, item)


def _copy_into(old: Optional[np.ndarray], block: Any) -> np.ndarray:
    """A copy of ``block``, in ``old`` when it has the same shape and
    dtype (a commit's own array, never handed out: fresh pages would cost
    a page fault per 4 KiB)."""
    block = np.asarray(block)
    if (old is None or old.shape != block.shape or old.dtype != block.dtype
            or not old.flags.writeable):
        return np.array(block)
    np.copyto(old, block)
    return old


class RowShardedState(ObjectState):
    """ObjectState plus tables sharded by rows over the ranks (an hbcore
    extension; Horovod's states hold replicated values only).

    Each rank holds one block of rows of each table, contiguous in id
    order (reshard.py).  A commit writes each rank's blocks on its host
    and on a second host (the module comment), and a world of another
    size reshards them from the commit.

    Args:
        tables: ``{name: the whole table}`` to start from (the same on
            every rank); each rank keeps its block.
        bcast_object: As State's.
        get_rank: As State's.
        **kwargs: ObjectState values.

    Attributes:
        shards: ``{name: this rank's block}`` (numpy arrays; change them
            in place or assign new blocks of the same rows).
    """

    _has_parts = True

    def __init__(self, tables: Dict[str, Any],
                 bcast_object: Optional[Callable] = None,
                 get_rank: Optional[Callable[[], int]] = None,
                 **kwargs: Any) -> None:
        super().__init__(bcast_object=bcast_object, get_rank=get_rank,
                         **kwargs)
        self._num_rows = {name: len(table) for name, table in tables.items()}
        rank, size = self._rank(), hb_size()
        self._saved_shards = {}
        for name, table in tables.items():
            start, stop = reshard.row_block(len(table), size, rank)
            self._saved_shards[name] = np.array(table[start:stop])
        self.shards = {n: b.copy() for n, b in self._saved_shards.items()}

    def save(self) -> None:
        """Makes the current values and blocks the commit (copied)."""
        self._saved_shards = {n: _copy_into(self._saved_shards.get(n), b)
                              for n, b in self.shards.items()}
        super().save()

    def restore(self) -> None:
        """Sets the values and blocks back to the last commit."""
        self.shards = {n: b.copy() for n, b in self._saved_shards.items()}
        super().restore()

    def _part_payload(self) -> Optional[bytes]:
        return reshard.pack_part(
            {name: (self._num_rows[name], block)
             for name, block in self._saved_shards.items()},
            hb_size(), self._rank())

    def _load_parts(self, parts: Iterable[bytes]) -> None:
        resharder = reshard.Resharder(hb_size(), self._rank())
        for part in parts:
            resharder.take(part)
        self._saved_shards = resharder.blocks()
        self.shards = {n: b.copy() for n, b in self._saved_shards.items()}
