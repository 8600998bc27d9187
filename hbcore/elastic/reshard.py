"""Row-sharded tables in a commit, and their resharding at a new size.

A table of ``num_rows`` rows is split over ``n`` ranks in contiguous
blocks in id order, the first ``num_rows % n`` ranks one row more (the
split of np.array_split, and of hbcore_tf's sharded embeddings: see
hbcore_tf/embedding/partition.py).  A rank's part of a commit is
``{table: (num_rows, first row, its block)}``.  A world of another size
rebuilds its blocks from the old parts, one part at a time: each row
lands where the new split puts it, so the table in id order is the same
whatever the sizes (as a checkpoint restored at another world size).
"""

import pickle
from typing import Dict, Mapping, Tuple

import numpy as np


def row_block(num_rows: int, shards: int, shard: int) -> Tuple[int, int]:
    """Returns ``(start, stop)``: the rows of ``shard`` of ``shards``.

    Args:
        num_rows: Rows of the whole table.
        shards: Ranks it is split over.
        shard: A rank in [0, shards).
    """
    base, extra = divmod(num_rows, shards)
    start = shard * base + min(shard, extra)
    return start, start + base + (1 if shard < extra else 0)


def pack_part(blocks: Mapping[str, Tuple[int, np.ndarray]], shards: int,
              shard: int) -> bytes:
    """A rank's part of a commit.

    Args:
        blocks: ``{table: (num_rows, this rank's block)}``.
        shards: The world size.
        shard: This rank.

    Returns:
        The bytes of the part.
    """
    return pickle.dumps({name: (num_rows, row_block(num_rows, shards,
                                                    shard)[0], block)
                         for name, (num_rows, block) in blocks.items()},
                        protocol=pickle.HIGHEST_PROTOCOL)


class Resharder:
    """Builds this rank's blocks at a new world size from old parts.

    Args:
        shards: The new world size.
        shard: This rank in it.
    """

    def __init__(self, shards: int, shard: int) -> None:
        self._shards, self._shard = shards, shard
        self._blocks: Dict[str, np.ndarray] = {}
        self._filled: Dict[str, int] = {}

    def take(self, part: bytes) -> None:
        """Copies the rows of one old part that this rank now holds."""
        for name, (num_rows, first, rows) in pickle.loads(part).items():
            start, stop = row_block(num_rows, self._shards, self._shard)
            if name not in self._blocks:
                self._blocks[name] = np.empty((stop - start,) + rows.shape[1:],
                                              rows.dtype)
                self._filled[name] = 0
            low, high = max(start, first), min(stop, first + len(rows))
            if low < high:
                self._blocks[name][low - start:high - start] = (
                    rows[low - first:high - first])
                self._filled[name] += high - low

    def blocks(self) -> Dict[str, np.ndarray]:
        """Returns ``{table: this rank's new block}``.

        Raises:
            ValueError: If the parts taken miss some of this rank's rows.
        """
        for name, block in self._blocks.items():
            if self._filled[name] != len(block):
                raise ValueError(
                    "elastic commit of table %r: %d of this rank's %d rows "
                    "were in the parts read" % (name, self._filled[name],
                                                len(block)))
        return dict(self._blocks)
