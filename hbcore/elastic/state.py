"""Horovod's elastic state objects over hbcore's per-host store.

Cross-rank contract: every rank creates the same state objects in the
same order and calls commit / check_host_updates / sync at the same
points of its program (each holds one collective).

- ``commit()``: ``save()`` (the state's values pickled, written to this
  host's store under the next commit number: store.py), then
  ``check_host_updates()``.
- ``check_host_updates()``: every rank looks for the driver's host-change
  notice; the answers are all-gathered, so if any rank saw it, every rank
  raises HostsUpdatedInterrupt from the same call.  All-gathering also
  means no rank leaves a commit before every rank has written its own.
- ``sync()``: 1. every rank reads its host's newest commit number (-1:
  none); 2. the numbers are all-gathered; 3. the lowest rank holding the
  highest number broadcasts its commit; 4. every rank takes it and writes
  it to its own host's store (a new host then holds it too).  With no
  commit anywhere (a fresh job) rank 0's current values are broadcast, as
  Horovod does.
- ``restore()``: back to the last commit this process made or received.
Outside an elastic job (no HB_ELASTIC_STORE) the objects behave as
Horovod's, in memory only.
"""

import pickle
from typing import Any, Callable, Dict, Iterable, List, Optional

from hbcore.basics import rank as hb_rank
from hbcore.elastic.store import Store
from hbcore.exceptions import HostsUpdatedInterrupt
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
            HostsUpdatedInterrupt: With ``skip_sync=False``.
        """
        store = self._elastic_store()
        if store is None:
            return
        if any(allgather_object(store.hosts_updated(),
                                name="elastic.hosts_updated")):
            raise HostsUpdatedInterrupt(False)

    def save(self) -> None:
        """Saves the state as the new commit."""
        payload = self._payload()
        self._commit += 1
        store = self._elastic_store()
        if store is not None:
            store.write(self._key, self._commit, payload)

    def sync(self) -> None:
        """Brings every rank to the newest commit (module comment)."""
        store = self._elastic_store()
        held = store.latest(self._key) if store is not None else None
        if held is not None and held[0] >= self._commit:
            self._commit = held[0]
            self._load(held[1])
        numbers = allgather_object(self._commit, name="elastic.sync.commits")
        newest = max(numbers)
        if newest < 0:
            self._load(self._bcast(self._payload(), 0))
            return
        root = numbers.index(newest)
        self._load(self._bcast(self._payload(), root))
        self._commit = newest
        if store is not None:
            store.write(self._key, self._commit, self._payload())

    def _bcast(self, payload: bytes, root: int) -> bytes:
        if root == 0:
            return self._bcast_object(payload)
        return self._bcast_object(payload, root_rank=root)

    def restore(self) -> None:
        """Undoes what was changed since the last commit."""
        raise NotImplementedError()

    def reset(self) -> None:
        """Rebuilds what depends on the world after a reset (before sync)."""

    def _payload(self) -> bytes:
        """The committed state as bytes."""
        raise NotImplementedError()

    def _load(self, payload: bytes) -> None:
        """Makes ``payload`` the committed and current state."""
        raise NotImplementedError()


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
        self._saved_state: Dict[str, Any] = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self) -> None:
        """Makes the current attribute values the commit (copied)."""
        self._saved_state = pickle.loads(pickle.dumps(
            {name: getattr(self, name) for name in self._saved_state}))
        super().save()

    def restore(self) -> None:
        """Sets the attributes back to the last commit."""
        self._set_attrs()

    def _payload(self) -> bytes:
        return pickle.dumps(self._saved_state)

    def _load(self, payload: bytes) -> None:
        self._saved_state = pickle.loads(payload)
        self._set_attrs()

    def _set_attrs(self) -> None:
        # Copies, so that changing an attribute in place (a list) never
        # changes the commit.
        for name, value in pickle.loads(pickle.dumps(
                self._saved_state)).items():
            setattr(self, name, value)
