"""The per-host store that keeps elastic commits outside the ranks.

Layout (root: HB_ELASTIC_STORE; hbrun's driver makes it in /dev/shm on
the launch host and removes it when the job ends; a rank on another host
makes its own host's directory on first use):

    <root>/<host>/<key>.<commit>.rep             the replicated values
    <root>/<host>/<key>.<commit>.part<p>of<n>    part p of a commit made
                                                 by a world of n ranks

``<key>`` names a state object (``ObjectState0``, ... in creation order,
the same on every rank).  The ``rep`` file holds what every rank holds
alike (ObjectState values, a dense model); a ``part`` file holds what one
rank holds alone (its rows of a sharded table), written by that rank on
its own host and, through replicas.py, on a second host.  A file is
written as ``<file>.tmp<slot>`` and renamed over ``<file>`` (atomic on
one file system), so a rank killed mid-write leaves no half file.

Only the first slot of a host writes its ``rep`` files
(``writes_replicated``): the replicated values are the same on every
rank, and one copy per host is what a lost host needs.  Every rank writes its own part.

Prune rule: a commit is removed only when a newer one is whole on every
live host.  A commit's files are written before its commit() reaches the
agreement (state.py: one allreduce that every rank enters after its
writes), so when the agreement of commit c returns on a rank, c is whole
on every host, and that rank removes its host's files of commits older
than c.  A rank killed while writing c + 1 leaves c to go back to; one
killed after its agreement of c leaves c too.  Commit numbers grow by one
per commit and carry over generations.

Writes are synchronous (the commit returns after its files exist): when a
rank dies, hydra SIGTERMs the others at once, so a write still in flight
in any process at a failure would be lost on every host, and a commit
that returned would be gone.  To keep a write near memcpy speed, a
removed file is not unlinked but kept as this slot's spare for the key
(``<key>.spare<slot>``) and the next write of the key overwrites it in
place: its pages are already allocated, where a new file in /dev/shm
costs a page fault and a zeroed page per 4 KiB (about 3x the memcpy).
A ``rep`` file is written through a shared mapping that this process
keeps (with the file open, so its inode number names it alone) for the
two files it wrote last, the current commit and the spare: the next
write into the same file is one memcpy into mapped pages (a ``write()``
into tmpfs costs about 3x that per page).  Bytes copied into a shared
mapping of a tmpfs file are in the file at once: a process killed after
the copy leaves them there.

Why per host and not per job: on a cluster /dev/shm is local, and a
rank can read only its own host's directory; a host that is lost takes
its directory with it.  Hosts emulated on one machine (hydra's fork
launcher) keep separate directories, so a test can lose one.
"""

import mmap
import os
import re
from collections import OrderedDict
from typing import Any, List, Mapping, Optional, Sequence, Set, Tuple

from hbcore.launcher.rank.elastic_protocol import (GENERATION_VAR, HOSTS_VAR,
                                                   STORE_VAR, host_of_rank,
                                                   parse_hosts_var)

# (commit, parts, part) of one file; a rep file is (commit, 0, 0).
Entry = Tuple[int, int, int]

_NAME = re.compile(r"^(?P<key>.+)\.(?P<commit>\d+)\."
                   r"(?:rep|part(?P<part>\d+)of(?P<parts>\d+))$")


class Store:
    """One rank's view of the store (see the module comment).

    Args:
        root: The job's store root.
        hosts: The generation's hosts, ``[(name, slots), ...]`` in rank
            order.
        rank: This rank.
        generation: The current generation.
    """

    def __init__(self, root: str, hosts: List[Tuple[str, int]], rank: int,
                 generation: int) -> None:
        self.root = root
        self.hosts = hosts
        self.generation = generation
        self.host, self._slot = host_of_rank(hosts, rank)
        self._dir = os.path.join(root, self.host)
        os.makedirs(self._dir, exist_ok=True)
        # inode -> (open fd, mapping) of the rep files written last.
        self._maps: "OrderedDict[int, Tuple[int, mmap.mmap]]" = OrderedDict()

    @classmethod
    def from_env(cls, rank: int,
                 environ: Mapping[str, str] = os.environ
                 ) -> Optional["Store"]:
        """The store of a rank started by hbrun's elastic driver.

        Args:
            rank: This rank.
            environ: The environment.

        Returns:
            The Store, or None outside an elastic job.
        """
        if not environ.get(STORE_VAR):
            return None
        return cls(environ[STORE_VAR], parse_hosts_var(environ[HOSTS_VAR]),
                   rank, int(environ.get(GENERATION_VAR, "0")))

    @staticmethod
    def _name(key: str, commit: int, parts: int = 0, part: int = 0) -> str:
        if parts == 0:
            return "%s.%d.rep" % (key, commit)
        return "%s.%d.part%dof%d" % (key, commit, part, parts)

    @property
    def writes_replicated(self) -> bool:
        """Whether this rank writes its host's ``rep`` files (the module
        comment: its first slot)."""
        return self._slot == 0

    def write(self, key: str, commit: int, chunks: Sequence[Any],
              parts: int = 0, part: int = 0) -> None:
        """Writes one file of a commit, atomically.

        Args:
            key: The state object.
            commit: The commit number.
            chunks: The bytes, in pieces (bytes-like objects) written one
                after the other.
            parts: 0 for the replicated values, else the world size of
                the commit.
            part: Which rank's part (with ``parts``).
        """
        path = os.path.join(self._dir, self._name(key, commit, parts, part))
        tmp = "%s.tmp%d" % (path, self._slot)
        try:
            # The spare (module comment): overwritten in place.
            os.replace(self._spare(key), tmp)
        except FileNotFoundError:
            pass
        views = [memoryview(c).cast("B") for c in chunks]
        size = sum(v.nbytes for v in views)
        if parts == 0 and size > 0:
            self._write_mapped(tmp, views, size)
        else:
            with open(tmp, "r+b" if os.path.exists(tmp) else "wb") as f:
                for view in views:
                    f.write(view)
                f.truncate()
        os.replace(tmp, path)

    def _write_mapped(self, path: str, views: Sequence[memoryview],
                      size: int) -> None:
        """Copies ``views`` into ``path`` through a kept mapping (the
        module comment)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        inode = os.fstat(fd).st_ino
        kept = self._maps.pop(inode, None)
        if kept is not None and len(kept[1]) == size:
            os.close(fd)
            fd, mapping = kept
            # Another slot may have written (and shortened) the file since
            # (its prune made it that slot's spare): no page of the mapping
            # may lie past the end of the file.
            os.ftruncate(fd, size)
        else:
            if kept is not None:
                self._unmap(kept)
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size)
        self._maps[inode] = (fd, mapping)
        while len(self._maps) > 2:
            self._unmap(self._maps.popitem(last=False)[1])
        offset = 0
        for view in views:
            mapping[offset:offset + view.nbytes] = view
            offset += view.nbytes

    @staticmethod
    def _unmap(kept: Tuple[int, mmap.mmap]) -> None:
        kept[1].close()
        os.close(kept[0])

    def read(self, key: str, commit: int, parts: int = 0,
             part: int = 0) -> bytes:
        """Reads one file of a commit (an entry ``entries`` listed)."""
        with open(os.path.join(self._dir, self._name(key, commit, parts,
                                                     part)), "rb") as f:
            return f.read()

    def _files(self, key: str) -> List[Tuple[str, Entry]]:
        found = []
        for name in os.listdir(self._dir):
            match = _NAME.match(name)
            if match is None or match.group("key") != key:
                continue
            found.append((name, (int(match.group("commit")),
                                 int(match.group("parts") or 0),
                                 int(match.group("part") or 0))))
        return found

    def entries(self, key: str) -> Set[Entry]:
        """The (commit, parts, part) of every file of ``key`` this host
        holds (parts 0: the replicated values)."""
        return {entry for _, entry in self._files(key)}

    def _spare(self, key: str) -> str:
        return os.path.join(self._dir, "%s.spare%d" % (key, self._slot))

    def prune(self, key: str, oldest: int) -> None:
        """Removes this host's files of commits older than ``oldest``; one
        becomes this slot's spare (the module comment)."""
        for name, (commit, _, _) in self._files(key):
            if commit < oldest:
                try:
                    # A rename over the spare drops the older spare.
                    os.replace(os.path.join(self._dir, name),
                               self._spare(key))
                except FileNotFoundError:
                    pass  # another slot of this host removed it first
