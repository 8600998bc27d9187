"""The canonical form of a checkpoint that holds sharded tables: the same
bytes whatever the world size that wrote it.

A collective save (saving.py) leaves a bundle whose data files and slice
entries follow the writing world: one slice per rank of every table and
slot, the ranks' data files side by side. Rank 0 then rewrites it in
place into the canonical form, which depends only on the logical tensors:

- one data file, ``PREFIX.data-00000-of-00001``; tensors in key order;
- a tensor stored as slices that split its first dimension only (a
  sharded table or slot, or a variable partitioned along rows) is joined
  into one tensor in id order; a tensor stored whole stays whole;
- a tensor of more than ``block_bytes`` (rank >= 1, numeric) is stored as
  row blocks of at most ``block_bytes`` each at fixed boundaries
  (``block_rows = block_bytes // row_bytes``), as TF slices of the full
  tensor. Every reader still sees the full tensor (Saver.restore,
  tf.train.Checkpoint, tf.train.load_variable); a rank restoring its
  rows reads only the blocks that overlap them, one block at a time, so
  no rank needs memory for a whole table to save or restore it;
- tensors sliced any other way (along another dimension), and strings,
  are copied as they are.

The rewrite streams bytes from the old data files to the new one in
chunks of at most ``block_bytes``, so it needs no more memory than one
chunk. Crash safety follows TF's own writer: the new data file and index
are written under a staging prefix and renamed, the index last; only then
are the old data files removed. A bundle written by one rank already has
the canonical data file's name, so there the new data file replaces the
old one before the new index replaces the old index: a crash between the
two renames leaves an index that does not match its data, which a restore
reports (the entries' checksums fail) rather than misreads. TF's own
writer has the same window when it saves over an existing prefix.
"""
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from hbcore_tf.embedding import bundle

_CHUNK = 16 << 20
_STAGING = "_hbcanonical"


class _Piece(NamedTuple):
    """Rows [start, start + rows) of a tensor, stored contiguously."""

    start: int
    rows: int
    shard: int
    offset: int


def _shape(entry: bundle.Entry) -> List[int]:
    return [d.size for d in entry.shape.dim]


def _row_pieces(name: bytes, entry: bundle.Entry,
                entries: Dict[bytes, bytes]) -> Optional[List[_Piece]]:
    """The stored pieces of a numeric tensor of rank >= 1 that tile its
    rows in order, or None when it is stored any other way."""
    shape = _shape(entry)
    dtype = tf.dtypes.as_dtype(entry.dtype)
    if not shape or dtype in (tf.string, tf.variant, tf.resource) \
            or dtype.size == 0:
        return None
    if not entry.slices:
        return [_Piece(0, shape[0], entry.shard_id, entry.offset)]
    pieces = []
    for proto in entry.slices:
        extents = bundle.proto_extents(proto)
        if len(extents) != len(shape):
            return None
        for (start, length), size in zip(extents[1:], shape[1:]):
            if not (length == -1 or (start == 0 and length == size)):
                return None
        start, length = extents[0]
        if length == -1:
            start, length = 0, shape[0]
        stored = bundle.Entry.FromString(
            entries[bundle.slice_key(name.decode(), extents)])
        pieces.append(_Piece(start, length, stored.shard_id, stored.offset))
    pieces.sort()
    row = 0
    for piece in pieces:
        if piece.start != row:
            return None
        row += piece.rows
    return pieces if row == shape[0] else None


class _Writer:
    """Appends bytes to the new data file and tracks their checksums."""

    def __init__(self, prefix: str, sources: Sequence[str]) -> None:
        self.out = tf.io.gfile.GFile(bundle.data_file(prefix, 0, 1), "wb")
        self.offset = 0
        self.sources = sources
        self.files: Dict[int, tf.io.gfile.GFile] = {}

    def close(self) -> None:
        self.out.close()
        for f in self.files.values():
            f.close()

    def copy(self, shard: int, offset: int, size: int, crc: int) -> int:
        """Appends ``size`` bytes of data file ``shard`` at ``offset``;
        returns the CRC-32C extending ``crc``."""
        source = self.files.get(shard)
        if source is None:
            source = tf.io.gfile.GFile(self.sources[shard], "rb")
            self.files[shard] = source
        source.seek(offset)
        while size > 0:
            chunk = source.read(min(size, _CHUNK))
            if not chunk:
                raise ValueError("%s: data file ends before byte %d" % (
                    self.sources[shard], offset + size))
            crc = bundle.crc32c(chunk, crc)
            self.out.write(chunk)
            self.offset += len(chunk)
            size -= len(chunk)
        return crc

    def rows(self, pieces: Sequence[_Piece], first: int, count: int,
             row_bytes: int) -> Tuple[int, int, int]:
        """Appends rows [first, first + count) assembled from ``pieces``;
        returns (offset, size, unmasked crc) of what it wrote."""
        offset, crc, end = self.offset, 0, first + count
        for piece in pieces:
            lo = max(first, piece.start)
            hi = min(end, piece.start + piece.rows)
            if lo < hi:
                crc = self.copy(piece.shard,
                                piece.offset + (lo - piece.start) * row_bytes,
                                (hi - lo) * row_bytes, crc)
        return offset, self.offset - offset, crc


def _located(dtype: int, shape: Sequence[int], offset: int, size: int,
             crc: int) -> bundle.Entry:
    entry = bundle.Entry(dtype=dtype, offset=offset, size=size,
                         crc32c=bundle.mask(crc))
    for d in shape:
        entry.shape.dim.add(size=d)
    return entry


def canonicalize(prefix: str, block_bytes: int) -> None:
    """Rewrites the checkpoint bundle ``prefix`` in place into the
    canonical form (module docstring).

    Args:
        prefix: a V2 checkpoint prefix (``prefix.index`` exists).
        block_bytes: the largest tensor stored whole, and the size of the
            row blocks of larger ones.

    Raises:
        ValueError: the bundle is malformed or uses a feature this
            module does not read (compressed index blocks).
        tf.errors.OpError, OSError: the files cannot be read or written.
    """
    entries = bundle.read_index(prefix)
    header = bundle.Header.FromString(entries[bundle.HEADER_KEY])
    sources = [bundle.data_file(prefix, i, header.num_shards)
               for i in range(header.num_shards)]
    staging = prefix + _STAGING
    writer = _Writer(staging, sources)
    out: List[Tuple[bytes, bytes]] = []
    try:
        for name in sorted(k for k in entries if k and k[0] != 0):
            entry = bundle.Entry.FromString(entries[name])
            out.extend(_rewrite(name, entry, entries, writer, block_bytes))
    finally:
        writer.close()
    header.num_shards = 1
    out.append((bundle.HEADER_KEY, header.SerializeToString()))
    bundle.write_index(staging + ".index", sorted(out))
    tf.io.gfile.rename(bundle.data_file(staging, 0, 1),
                       bundle.data_file(prefix, 0, 1), overwrite=True)
    tf.io.gfile.rename(staging + ".index", prefix + ".index", overwrite=True)
    kept = bundle.data_file(prefix, 0, 1)
    for old in sources:
        if old != kept:
            tf.io.gfile.remove(old)


def _rewrite(name: bytes, entry: bundle.Entry, entries: Dict[bytes, bytes],
             writer: _Writer, block_bytes: int) -> List[Tuple[bytes, bytes]]:
    """The new index entries of one tensor, its bytes appended."""
    pieces = _row_pieces(name, entry, entries)
    if pieces is None:
        return _copy_as_stored(name, entry, entries, writer)
    shape = _shape(entry)
    rows = shape[0]
    row_bytes = tf.dtypes.as_dtype(entry.dtype).size
    for d in shape[1:]:
        row_bytes *= d
    if rows * row_bytes <= block_bytes or row_bytes == 0:
        offset, size, crc = writer.rows(pieces, 0, rows, row_bytes)
        return [(name, _located(entry.dtype, shape, offset, size,
                                crc).SerializeToString())]
    block_rows = max(1, block_bytes // row_bytes)
    full = bundle.Entry(dtype=entry.dtype)
    full.shape.CopyFrom(entry.shape)
    result = []
    for first in range(0, rows, block_rows):
        count = min(block_rows, rows - first)
        extents = [(first, count)] + [(0, d) for d in shape[1:]]
        full.slices.add().CopyFrom(bundle.slice_proto(extents))
        offset, size, crc = writer.rows(pieces, first, count, row_bytes)
        stored = _located(entry.dtype, [count] + shape[1:], offset, size,
                          crc)
        result.append((bundle.slice_key(name.decode(), extents),
                       stored.SerializeToString()))
    result.append((name, full.SerializeToString()))
    return result


def _copy_as_stored(name: bytes, entry: bundle.Entry,
                    entries: Dict[bytes, bytes], writer: _Writer
                    ) -> List[Tuple[bytes, bytes]]:
    """A tensor kept as it is stored (whole, or its own slices): bytes
    copied, checksums kept (a string tensor's covers its length prefix
    too, as TF computes it)."""
    if not entry.slices:
        return [(name, _moved(entry, writer))]
    result = [(name, entries[name])]
    for proto in entry.slices:
        key = bundle.slice_key(name.decode(), bundle.proto_extents(proto))
        result.append((key, _moved(bundle.Entry.FromString(entries[key]),
                                   writer)))
    return result


def _moved(entry: bundle.Entry, writer: _Writer) -> bytes:
    """``entry`` with its bytes appended to the new data file."""
    moved = bundle.Entry()
    moved.CopyFrom(entry)
    moved.shard_id = 0
    moved.offset = writer.offset
    writer.copy(entry.shard_id, entry.offset, entry.size, 0)
    return moved.SerializeToString()
