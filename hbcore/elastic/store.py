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

The two newest commits of a key are kept: every rank finishes writing
commit c (its own files and its buddy's part) before commit c's
host-change check returns anywhere (that check is an all-gather), so
when a rank writes c + 1 and removes c - 1, commit c is whole on every
live host, and a rank killed while writing c + 1 leaves c to go back to.
Commit numbers grow by one per commit and carry over generations.

Why per host and not per job: on a cluster /dev/shm is local, and a
rank can read only its own host's directory; a host that is lost takes
its directory with it.  Hosts emulated on one machine (hydra's fork
launcher) keep separate directories, so a test can lose one.
"""

import os
import re
from typing import List, Mapping, Optional, Set, Tuple

from hbcore.launcher.elastic_protocol import (GENERATION_VAR, HOSTS_VAR,
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

    def write(self, key: str, commit: int, payload: bytes, parts: int = 0,
              part: int = 0) -> None:
        """Writes one file of a commit, atomically.

        Args:
            key: The state object.
            commit: The commit number.
            payload: The bytes.
            parts: 0 for the replicated values, else the world size of
                the commit.
            part: Which rank's part (with ``parts``).
        """
        path = os.path.join(self._dir, self._name(key, commit, parts, part))
        tmp = "%s.tmp%d" % (path, self._slot)
        with open(tmp, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)

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

    def prune(self, key: str, oldest: int) -> None:
        """Removes this host's files of commits older than ``oldest``."""
        for name, (commit, _, _) in self._files(key):
            if commit < oldest:
                try:
                    os.remove(os.path.join(self._dir, name))
                except FileNotFoundError:
                    pass  # another slot of this host removed it first
