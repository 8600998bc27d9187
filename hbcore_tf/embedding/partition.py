"""Which rank owns which rows of a sharded embedding table.

Row-wise, contiguous blocks (TorchRec's row-wise sharding, TF's
fixed-size partitions): with ``num_rows`` rows over ``num_shards`` ranks,
rank r owns ``num_rows // num_shards`` rows, plus one when
``r < num_rows % num_shards``, starting at row ``offset(r)``. This is the
same split as ``reducescatter``'s. Contiguous blocks make a rank's rows one
slice of the full table, so a checkpoint stores the table in id order as
one slice per rank whatever the world size (see hbcore_tf.embedding.save_protocol).
Ids hashed into the table spread evenly over the blocks. The lookup's
routing kernel (csrc/tf/shard_route.cc) computes the owner of an id with
the same formula.

A dynamic table (hbcore_tf.embedding.dynamic_table) has no row blocks: its
keys go to rank ``mix(key) % num_shards`` (``HashPartition``, computed by
the same kernel), and each rank holds ``capacity`` rows of its own.
"""
from typing import NamedTuple


class RowPartition(NamedTuple):
    """The row blocks of one table.

    Attributes:
        num_rows: rows of the whole table (its bucket size).
        num_shards: ranks the table is split over.
    """

    num_rows: int
    num_shards: int

    @property
    def hashed(self) -> bool:
        """False: ids are row numbers, owned by blocks."""
        return False

    def rows(self, shard: int) -> int:
        """Rows held by ``shard``.

        Args:
            shard: a rank in [0, num_shards).

        Returns:
            ``num_rows // num_shards``, plus one for each of the first
            ``num_rows % num_shards`` shards.
        """
        q, rem = divmod(self.num_rows, self.num_shards)
        return q + (1 if shard < rem else 0)

    def offset(self, shard: int) -> int:
        """Global id of ``shard``'s first row.

        Args:
            shard: a rank in [0, num_shards).

        Returns:
            The number of rows held by the shards before ``shard``.
        """
        q, rem = divmod(self.num_rows, self.num_shards)
        return shard * q + min(shard, rem)


class HashPartition(NamedTuple):
    """The key ownership of a dynamic table: rank ``mix(key) % num_shards``
    owns a key (``mix``: the splitmix64 finalizer, csrc/tf/shard_route.cc),
    and every rank holds up to ``capacity`` rows of its own.

    Attributes:
        capacity: rows each rank can hold.
        num_shards: ranks the table is spread over.
    """

    capacity: int
    num_shards: int

    @property
    def hashed(self) -> bool:
        """True: ids are keys, owned by their hash."""
        return True

    @property
    def num_rows(self) -> int:
        """Rows of this rank's store (a dynamic table has no global row
        count)."""
        return self.capacity

    def rows(self, shard: int) -> int:
        """Rows ``shard`` can hold: ``capacity``."""
        return self.capacity

    def offset(self, shard: int) -> int:
        """0: every rank's store starts at row 0."""
        return 0
