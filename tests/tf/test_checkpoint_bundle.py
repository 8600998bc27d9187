"""hbcore_tf.embedding.bundle and canonical (one process): TensorFlow's
bundle format read and written without TensorFlow's writer, checked
against bundles TensorFlow wrote and read back by TensorFlow's reader.
The multi-rank side (the same bytes at 1, 2 and 3 ranks) is in
test_sharded_checkpoint.py."""
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

# Written by plain TensorFlow in a subprocess (a v1 graph): a variable
# partitioned in 3 row slices, one partitioned along columns, a dense
# variable and a string.
WRITER = r"""
import sys
import numpy as np, tensorflow as tf
V1 = tf.compat.v1
V1.disable_eager_execution()
full = np.arange(30, dtype=np.float32).reshape(10, 3)
def init(shape, dtype=None, partition_info=None):
    start = partition_info.var_offset[0]
    return tf.constant(full[start:start + shape[0]])
rows = V1.get_variable("rows", shape=[10, 3], initializer=init,
                       partitioner=V1.fixed_size_partitioner(3))
cols = V1.get_variable("cols", shape=[2, 6], initializer=V1.ones_initializer(),
                       partitioner=V1.fixed_size_partitioner(2, axis=1))
dense = V1.get_variable("dense", initializer=np.arange(4, dtype=np.float64))
text = V1.Variable("hello", name="text")
with V1.Session() as s:
    s.run(V1.global_variables_initializer())
    V1.train.Saver().save(s, sys.argv[1], write_meta_graph=False)
"""


@pytest.fixture(scope="module")
def tf_bundle(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("bundle") / "ck")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HB_")}
    out = subprocess.run([sys.executable, "-c", WRITER, prefix], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return prefix


def copy_bundle(prefix, dest):
    for f in glob.glob(prefix + ".*"):
        shutil.copy(f, dest + f[len(prefix):])
    return dest


def test_crc32c_and_mask():
    from hbcore_tf.embedding import bundle

    # The check value of CRC-32C, and extension in two pieces.
    assert bundle.crc32c(b"123456789") == 0xe3069283
    data = np.random.default_rng(1).integers(0, 256, 100003, np.uint8)
    assert bundle.crc32c(data[7:].tobytes(), bundle.crc32c(
        data[:7].tobytes())) == bundle.crc32c(data.tobytes())
    # crc32c::Mask: rotate right by 15, add 0xa282ead8.
    crc = 0xe3069283
    assert bundle.mask(crc) == (((crc >> 15) | (crc << 17)) + 0xa282ead8) \
        % (1 << 32)


def test_reads_what_tensorflow_wrote(tf_bundle):
    from hbcore_tf.embedding import bundle

    entries = bundle.read_index(tf_bundle)
    header = bundle.Header.FromString(entries[b""])
    assert header.num_shards == 1
    rows = bundle.Entry.FromString(entries[b"rows"])
    extents = [bundle.proto_extents(p) for p in rows.slices]
    assert extents == [[(0, 4), (0, 3)], [(4, 3), (0, 3)], [(7, 3), (0, 3)]]
    with open(bundle.data_file(tf_bundle, 0, 1), "rb") as f:
        data = f.read()
    for ext in extents:
        # Our key encoding finds TensorFlow's slice entries, and their
        # checksums are the masked CRC-32C of their bytes.
        stored = bundle.Entry.FromString(entries[bundle.slice_key("rows",
                                                                  ext)])
        chunk = data[stored.offset:stored.offset + stored.size]
        assert stored.crc32c == bundle.mask(bundle.crc32c(chunk))
        start, length = ext[0]
        want = np.arange(30, dtype=np.float32).reshape(10, 3)[
            start:start + length]
        np.testing.assert_array_equal(
            np.frombuffer(chunk, np.float32).reshape(length, 3), want)


def test_index_round_trip_over_many_blocks(tmp_path):
    from hbcore_tf.embedding import bundle

    # About 1 MiB of entries: several 256 KiB blocks and restart groups.
    entries = [(b"name/%06d" % i, bytes([i % 251]) * (i % 97))
               for i in range(20000)]
    path = str(tmp_path / "x.index")
    bundle.write_index(path, entries)
    assert os.path.getsize(path) > 3 * 256 * 1024
    assert list(bundle.read_index(str(tmp_path / "x")).items()) == entries
    with pytest.raises(ValueError, match="out of order"):
        bundle.write_index(path, [(b"b", b""), (b"a", b"")])
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xfe")
    with pytest.raises(ValueError, match="checksum"):
        bundle.read_index(str(tmp_path / "x"))
    # A footer whose index handle points at the data block instead (whose
    # checksum holds): its empty values are no block handles, and the file
    # is named as a corrupt index.
    bundle.write_index(path, [(b"a", b""), (b"b", b"")])
    data = bytearray(open(path, "rb").read())
    meta_offset, pos = bundle._get_varint(data, len(data) - 48)
    meta_size, _ = bundle._get_varint(data, pos)
    data_block = bundle._handle(0, meta_offset - 5)  # 5: a block's trailer
    footer = bundle._handle(meta_offset, meta_size) + data_block
    data[-48:-8] = footer.ljust(40, b"\0")
    with open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(ValueError, match="x.index: corrupt bundle index"):
        bundle.read_index(str(tmp_path / "x"))


@pytest.mark.parametrize("block_bytes", [1 << 20, 24, 1])
def test_canonical_bundle_reads_the_same_in_tensorflow(tf_bundle, tmp_path,
                                                       block_bytes):
    import tensorflow as tf

    from hbcore_tf.embedding import bundle
    from hbcore_tf.embedding.canonical import canonicalize

    prefix = copy_bundle(tf_bundle, str(tmp_path / "ck"))
    canonicalize(prefix, block_bytes)
    assert sorted(os.listdir(tmp_path)) == ["ck.data-00000-of-00001",
                                            "ck.index"]
    before = tf.train.load_checkpoint(tf_bundle)
    after = tf.train.load_checkpoint(prefix)
    assert (after.get_variable_to_shape_map() ==
            before.get_variable_to_shape_map())
    for name in before.get_variable_to_shape_map():
        want, got = before.get_tensor(name), after.get_tensor(name)
        if isinstance(want, bytes):
            assert got == want
        else:
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype
    entries = bundle.read_index(prefix)
    rows = bundle.Entry.FromString(entries[b"rows"])
    got = [bundle.proto_extents(p)[0] for p in rows.slices]
    # Row-partitioned: joined, then cut at fixed boundaries when larger
    # than block_bytes (a row is 12 bytes, at least one row per block).
    per_block = max(1, block_bytes // 12)
    want = ([] if per_block >= 10 else
            [(r, min(per_block, 10 - r)) for r in range(0, 10, per_block)])
    assert got == want
    # Partitioned along columns: kept as TensorFlow stored it.
    cols = bundle.Entry.FromString(entries[b"cols"])
    assert [bundle.proto_extents(p) for p in cols.slices] == [
        [(0, 2), (0, 3)], [(0, 2), (3, 3)]]
    # A slice of the row blocks, as a restoring rank reads it.
    part = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=["rows"],
                                shape_and_slices=["10 3 3,5:0,3"],
                                dtypes=[tf.float32])[0]
    np.testing.assert_array_equal(
        part.numpy(), np.arange(30, dtype=np.float32).reshape(10, 3)[3:8])
    # Canonical is a fixed point: rewriting again changes no byte.
    again = copy_bundle(prefix, str(tmp_path / "again"))
    canonicalize(again, block_bytes)
    for suffix in (".index", ".data-00000-of-00001"):
        with open(prefix + suffix, "rb") as a, open(again + suffix, "rb") as b:
            assert a.read() == b.read(), suffix
