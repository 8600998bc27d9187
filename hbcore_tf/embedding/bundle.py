"""TensorFlow's V2 checkpoint bundle format, read and written without TF's
bundle reader and writer (files through tf.io.gfile, so any filesystem TF
reaches).

A bundle ``PREFIX`` is ``PREFIX.index`` plus data files
``PREFIX.data-<shard>-of-<num_shards>``. The index is a LevelDB-style
table (sorted keys, prefix-compressed blocks, block handles, a footer)
mapping:

- ``""`` to a ``BundleHeaderProto`` (number of data files, endianness);
- a tensor's name to its ``BundleEntryProto``: dtype, shape, and either
  where its bytes are (data file ``shard_id``, ``offset``, ``size``, the
  masked CRC-32C of the bytes), or, for a tensor saved as slices, the
  list of slices (``TensorSliceProto``), each stored under its own key
  (``slice_key``) with an entry of the first kind.

hbcore_tf.embedding.save_protocol rewrites a merged checkpoint of sharded tables
with these pieces so that its bytes do not depend on the world size that
wrote it (see canonical.py). TensorFlow has no Python API for writing an
entry whose bytes it did not hold in memory at once, which a table larger
than one rank's memory needs.

Only what TensorFlow's bundle writer produces is read: uncompressed
blocks, little-endian data. Checksums of blocks and entries are written
as TensorFlow writes them (tsl/lib/io/format.cc, tensor_bundle.cc).
"""
import struct
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.core.framework import tensor_slice_pb2
from tensorflow.core.protobuf import tensor_bundle_pb2

from hbcore._native import core

HEADER_KEY = b""
_TABLE_MAGIC = 0xdb4775248b80fb57
_FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the magic
_BLOCK_TRAILER = 5  # compression type byte + masked CRC-32C
_NO_COMPRESSION = 0
_RESTART_INTERVAL = 16
_BLOCK_SIZE = 256 * 1024  # TensorFlow's table default
_MASK_DELTA = 0xa282ead8

Entry = tensor_bundle_pb2.BundleEntryProto
Header = tensor_bundle_pb2.BundleHeaderProto


# --- checksums ------------------------------------------------------------------

def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C of ``data`` extending ``crc`` (unmasked).

    Args:
        data: the bytes to checksum.
        crc: the CRC-32C of the bytes before ``data`` (0 to start).

    Returns:
        The unmasked CRC-32C, a 32-bit unsigned integer.
    """
    return core.crc32c(data, crc)


def mask(crc: int) -> int:
    """TensorFlow's masked CRC (crc32c::Mask): what bundles store.

    Args:
        crc: an unmasked CRC-32C.

    Returns:
        The masked CRC, a 32-bit unsigned integer.
    """
    return ((((crc >> 15) | (crc << 17)) & 0xffffffff) + _MASK_DELTA) \
        & 0xffffffff


# --- varints and OrderedCode --------------------------------------------------------

def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7f) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7f) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _ordered_num(value: int) -> bytes:
    """OrderedCode::WriteNumIncreasing: a length byte, then big-endian
    bytes without leading zeros."""
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([len(body)]) + body


def _ordered_string(value: bytes) -> bytes:
    """OrderedCode::WriteString: 0x00 and 0xff escaped, then 0x00 0x01."""
    return _escape(value) + b"\x00\x01"


def _escape(value: bytes) -> bytes:
    out = bytearray()
    for byte in value:
        if byte == 0x00:
            out += b"\x00\xff"
        elif byte == 0xff:
            out += b"\xff\x00"
        else:
            out.append(byte)
    return bytes(out)


# OrderedCode's header bits of a signed number encoded in n bytes.
_SIGNED_HEADER = [(0x00, 0x00), (0x80, 0x00), (0xc0, 0x00), (0xe0, 0x00),
                  (0xf0, 0x00), (0xf8, 0x00), (0xfc, 0x00), (0xfe, 0x00),
                  (0xff, 0x00), (0xff, 0x80), (0xff, 0xc0)]


def _ordered_signed(value: int) -> bytes:
    """OrderedCode::WriteSignedNumIncreasing."""
    x = ~value if value < 0 else value
    if x < 64:
        return bytes([(0x80 ^ value) & 0xff])
    length = x.bit_length() // 7 + 1
    raw = bytearray((value & ((1 << 80) - 1)).to_bytes(10, "big"))
    body = raw[10 - length:]
    body[0] ^= _SIGNED_HEADER[length][0]
    body[1] ^= _SIGNED_HEADER[length][1]
    return bytes(body)


def slice_key(name: str, extents: Sequence[Tuple[int, int]]) -> bytes:
    """The index key of one slice of tensor ``name``
    (checkpoint::EncodeTensorNameSlice).

    Args:
        name: the full tensor's name.
        extents: (start, length) per dimension; (0, -1) is the whole
            dimension.

    Returns:
        The key (it starts with 0x00, so slices sort before tensors).
    """
    out = _ordered_num(0) + _ordered_string(name.encode()) + \
        _ordered_num(len(extents))
    for start, length in extents:
        out += _ordered_signed(start) + _ordered_signed(length)
    return out


def slice_proto(extents: Sequence[Tuple[int, int]]
                ) -> tensor_slice_pb2.TensorSliceProto:
    """A TensorSliceProto; a whole dimension is an empty extent.

    Args:
        extents: (start, length) per dimension; a length of -1 is the
            whole dimension.

    Returns:
        The TensorSliceProto, one extent per dimension.
    """
    proto = tensor_slice_pb2.TensorSliceProto()
    for start, length in extents:
        extent = proto.extent.add()
        if length != -1:
            extent.start = start
            extent.length = length
    return proto


def proto_extents(proto: tensor_slice_pb2.TensorSliceProto
                  ) -> List[Tuple[int, int]]:
    """(start, length) per dimension of a TensorSliceProto ((0, -1): all).

    Args:
        proto: a slice, as listed in a BundleEntryProto.

    Returns:
        One (start, length) pair per dimension; (0, -1) for a whole
        dimension.
    """
    return [(e.start, e.length if e.HasField("length") else -1)
            for e in proto.extent]


# --- the index table ----------------------------------------------------------------

def _block_entries(block: bytes) -> Iterator[Tuple[bytes, bytes]]:
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * num_restarts
    pos, key = 0, b""
    while pos < end:
        shared, pos = _get_varint(block, pos)
        unshared, pos = _get_varint(block, pos)
        size, pos = _get_varint(block, pos)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + size]
        pos += size


def _block_checksum(contents: bytes, compression: int) -> int:
    """The masked CRC-32C in a block's trailer: of the block's contents
    and its compression type byte."""
    return mask(crc32c(bytes([compression]), crc32c(contents)))


def _read_block(data: bytes, handle: bytes, what: str) -> bytes:
    offset, pos = _get_varint(handle, 0)
    size, _ = _get_varint(handle, pos)
    block = data[offset:offset + size]
    trailer = data[offset + size:offset + size + _BLOCK_TRAILER]
    if len(block) != size or len(trailer) != _BLOCK_TRAILER:
        raise ValueError("%s: truncated block" % what)
    if trailer[0] != _NO_COMPRESSION:
        raise ValueError("%s: compressed index blocks are not supported"
                         % what)
    stored = struct.unpack_from("<I", trailer, 1)[0]
    if stored != _block_checksum(block, trailer[0]):
        raise ValueError("%s: index block checksum mismatch" % what)
    return block


def read_index(prefix: str) -> Dict[bytes, bytes]:
    """Every (key, value) of ``prefix.index``, in key order.

    Args:
        prefix: the bundle's prefix (the file read is ``prefix.index``).

    Returns:
        A dict from key to value (a serialized BundleHeaderProto under
        ``HEADER_KEY``, else a serialized BundleEntryProto), iterating in
        the file's key order.

    Raises:
        ValueError: the file is not a bundle index this module can read
            (no table magic; a truncated, compressed or corrupt block).
        tf.errors.NotFoundError: the file does not exist.
        tf.errors.OpError: it cannot be read otherwise.
    """
    path = prefix + ".index"
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    if len(data) < _FOOTER_SIZE or struct.unpack_from(
            "<Q", data, len(data) - 8)[0] != _TABLE_MAGIC:
        raise ValueError("%s: not a TensorFlow bundle index" % path)
    footer = data[len(data) - _FOOTER_SIZE:]
    # The footer and the block handles carry no checksum of their own: a
    # damaged one shows as a varint or a restart array running off its
    # bytes, which is reported as the file's corruption.
    try:
        _, pos = _get_varint(footer, 0)  # the metaindex block: unused
        _, pos = _get_varint(footer, pos)
        index = _read_block(data, footer[pos:], path)
        entries: Dict[bytes, bytes] = {}
        for _, handle in _block_entries(index):
            entries.update(_block_entries(_read_block(data, handle, path)))
    except (IndexError, struct.error) as e:
        raise ValueError("%s: corrupt bundle index (%s)" % (path, e)) from e
    return entries


class _BlockBuilder:
    """One table block: prefix-compressed entries with restart points."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.restarts = [0]
        self.count = 0
        self.last = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < _RESTART_INTERVAL:
            limit = min(len(key), len(self.last))
            while shared < limit and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.count = 0
        _put_varint(self.buffer, shared)
        _put_varint(self.buffer, len(key) - shared)
        _put_varint(self.buffer, len(value))
        self.buffer += key[shared:] + value
        self.last = key
        self.count += 1

    def finish(self) -> bytes:
        out = bytearray(self.buffer)
        for restart in self.restarts:
            out += struct.pack("<I", restart)
        out += struct.pack("<I", len(self.restarts))
        return bytes(out)

    def size(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4


def _handle(offset: int, size: int) -> bytes:
    out = bytearray()
    _put_varint(out, offset)
    _put_varint(out, size)
    return bytes(out)


def write_index(path: str, entries: Sequence[Tuple[bytes, bytes]]) -> None:
    """Writes a bundle index table holding ``entries`` to ``path``.

    Args:
        path: the file to write (``PREFIX.index``).
        entries: (key, value) pairs in strictly increasing key order.

    Raises:
        ValueError: the keys are not strictly increasing.
    """
    out = bytearray()
    index = _BlockBuilder()

    def flush(block: _BlockBuilder) -> bytes:
        contents = block.finish()
        handle = _handle(len(out), len(contents))
        out.extend(contents)
        out.append(_NO_COMPRESSION)
        out.extend(struct.pack("<I", _block_checksum(contents,
                                                     _NO_COMPRESSION)))
        return handle

    block = _BlockBuilder()
    previous: Optional[bytes] = None
    for key, value in entries:
        if previous is not None and key <= previous:
            raise ValueError("bundle index keys out of order: %r after %r"
                             % (key, previous))
        block.add(key, value)
        previous = key
        if block.size() >= _BLOCK_SIZE:
            index.add(key, flush(block))
            block = _BlockBuilder()
    if block.count or previous is None:
        index.add(previous or b"", flush(block))
    meta_handle = flush(_BlockBuilder())
    index_handle = flush(index)
    footer = bytearray(meta_handle + index_handle)
    footer += b"\x00" * (_FOOTER_SIZE - 8 - len(footer))
    footer += struct.pack("<Q", _TABLE_MAGIC)
    out += footer
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(bytes(out))


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    """The name of data file ``shard`` of a bundle.

    Args:
        prefix: the bundle's prefix.
        shard: the data file's index, in [0, num_shards).
        num_shards: the bundle's number of data files.

    Returns:
        ``prefix.data-<shard>-of-<num_shards>``, both numbers written
        with five digits.
    """
    return "%s.data-%05d-of-%05d" % (prefix, shard, num_shards)
