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
