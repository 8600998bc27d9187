"""The per-host store that keeps elastic commits outside the ranks.

Layout (root: HB_ELASTIC_STORE, made by hbrun's driver in /dev/shm and
removed when the job ends):

    <root>/<host>/<key>.slot<i>     one file per state object and slot

``<key>`` names a state object (``ObjectState0``, ... in creation order,
the same on every rank); ``i`` is the rank's slot on its host.  A file
holds an 8-byte commit number and the state's bytes.  A commit writes
``<file>.tmp`` and renames it over ``<file>`` (atomic on one file
system), so a rank killed mid-commit leaves the previous commit whole.
Commit numbers grow by one per commit and carry over generations, so the
highest number any surviving rank holds is the last commit of the job.

Why per host and not per job: on a cluster /dev/shm is local, and a
rank can read only its own host's directory; a host that is lost takes
its directory with it.  Replicated state (every ObjectState and dense
model) is identical on every rank, so any surviving host holds all of it.
"""

import glob
import os
import struct
from typing import Mapping, Optional, Tuple

from hbcore.launcher.elastic_protocol import (GENERATION_VAR, HOSTS_VAR,
                                              STORE_VAR, host_of_rank,
                                              notice_path, parse_hosts_var)

_HEADER = struct.Struct("<q")


class Store:
    """One rank's view of the store (see the module comment).

    Args:
        root: The job's store root.
        host: This rank's host (its name in HB_ELASTIC_HOSTS).
        slot: This rank's slot index on that host.
        generation: The current generation.
    """

    def __init__(self, root: str, host: str, slot: int,
                 generation: int) -> None:
        self.root = root
        self.host = host
        self.generation = generation
        self._dir = os.path.join(root, host)
        self._slot = slot
        os.makedirs(self._dir, exist_ok=True)

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
        host, slot = host_of_rank(parse_hosts_var(environ[HOSTS_VAR]), rank)
        return cls(environ[STORE_VAR], host, slot,
                   int(environ.get(GENERATION_VAR, "0")))

    def write(self, key: str, commit: int, payload: bytes) -> None:
        """Writes one commit of the state ``key``, atomically."""
        path = os.path.join(self._dir, "%s.slot%d" % (key, self._slot))
        with open(path + ".tmp", "wb") as f:
            f.write(_HEADER.pack(commit))
            f.write(payload)
        os.replace(path + ".tmp", path)

    def latest(self, key: str) -> Optional[Tuple[int, bytes]]:
        """Returns this host's newest commit of ``key``, or None.

        Every slot's file counts: a rank that moved to another slot of
        the same host still finds what it committed.
        """
        best: Optional[Tuple[int, bytes]] = None
        for path in glob.glob(os.path.join(glob.escape(self._dir),
                                           glob.escape(key) + ".slot*")):
            if path.endswith(".tmp"):
                continue
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < _HEADER.size:
                continue
            commit = _HEADER.unpack_from(data)[0]
            if best is None or commit > best[0]:
                best = (commit, data[_HEADER.size:])
        return best

    def hosts_updated(self) -> bool:
        """Whether the driver posted this generation's host-change notice."""
        return os.path.exists(notice_path(self.root, self.generation))
