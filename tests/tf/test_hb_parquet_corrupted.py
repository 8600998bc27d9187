"""hb.data.ParquetDataset(skip_corrupted_data=...) (HybridBackend's
argument, default False) on genuinely corrupted Parquet files next to good
ones: a file whose middle row group's pages are overwritten (its footer
intact) and a truncated file (its footer gone).

As in HybridBackend (its dataset kernel skips reads that fail while the
file is read, not files that cannot be opened): with the flag, the rows of
the unreadable row group are skipped and every other row comes out exactly
as pyarrow reads it; without it, iterating fails naming the file and the
row group; a truncated file fails either way, naming the file.
"""
import inspect
import logging

import numpy as np
import pytest

from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def arrow():
    """pyarrow and pyarrow.parquet through hbcore's own import (the [test]
    extra installs pyarrow), called by the tests that use them: a pyarrow
    that cannot import fails those tests with its reason instead of
    stopping the collection of the whole suite (hbcore_tf, like in the
    tests, is imported only once TensorFlow is known to be there)."""
    from hbcore_tf.data._parquet_schema import pyarrow_modules
    return pyarrow_modules()


GROUP_ROWS = 10
BATCH = 7


def write(path, first_id, rows):
    pa, pq = arrow()
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    table = pa.table({"id": pa.array(ids),
                      "x": pa.array(ids * 0.5 + 0.25, pa.float64()),
                      "tags": pa.array([[int(i)] * (int(i) % 3) for i in ids],
                                       pa.list_(pa.int32()))})
    pq.write_table(table, str(path), row_group_size=GROUP_ROWS,
                   compression="none")
    return str(path)


def corrupt_row_group(path, group):
    """Overwrites every byte of row group ``group``'s first column chunk
    (dictionary and data pages), leaving the footer intact."""
    _, pq = arrow()
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(group).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(b"\xff" * chunk.total_compressed_size)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """good0 (25 rows), bad (30 rows, row group 1 unreadable), good1 (12
    rows), and truncated (a good file cut short)."""
    _, pq = arrow()
    root = tmp_path_factory.mktemp("parquet")
    good0 = write(root / "good0.parquet", 0, 25)
    bad = write(root / "bad.parquet", 100, 30)
    corrupt_row_group(bad, 1)
    good1 = write(root / "good1.parquet", 200, 12)
    truncated = write(root / "truncated.parquet", 300, 20)
    with open(truncated, "rb") as f:
        data = f.read()
    with open(truncated, "wb") as f:
        f.write(data[:len(data) * 2 // 3])
    # The corruption is real: pyarrow itself cannot read that row group.
    with pytest.raises(OSError):
        pq.ParquetFile(bad).read_row_group(1)
    return {"good0": good0, "bad": bad, "good1": good1,
            "truncated": truncated}


def readable_tables(files, names):
    """What pyarrow reads of each file: every row group it can read (all of
    a good file; row groups 0 and 2 of the corrupted one)."""
    pa, pq = arrow()
    tables = []
    for name in names:
        reader = pq.ParquetFile(files[name])
        groups = [g for g in range(reader.metadata.num_row_groups)
                  if not (name == "bad" and g == 1)]
        tables.append(pa.concat_tables(
            [reader.read_row_group(g) for g in groups]))
    return tables


def expected_batches(tables):
    """Batches of BATCH rows cut per file (batches never span files)."""
    out = []
    for table in tables:
        for start in range(0, table.num_rows, BATCH):
            part = table.slice(start, BATCH)
            out.append({"id": part.column("id").to_pylist(),
                        "x": part.column("x").to_pylist(),
                        "tags": part.column("tags").to_pylist()})
    return out


def as_lists(dataset):
    import tensorflow as tf

    # A list column is an hb.data.DataFrame.Value: TF's ragged tensor of
    # its values and row splits gives the rows.
    return [{"id": b["id"].numpy().tolist(), "x": b["x"].numpy().tolist(),
             "tags": tf.RaggedTensor.from_nested_row_splits(
                 b["tags"].values, b["tags"].nested_row_splits).to_list()}
            for b in dataset]


def test_default_matches_hybridbackend():
    import hbcore_tf.data as hb_data

    for fn in (hb_data.ParquetDataset.__init__, hb_data.read_parquet):
        param = inspect.signature(fn).parameters["skip_corrupted_data"]
        assert param.default is False


def test_skips_the_unreadable_row_group(files, caplog):
    import hbcore_tf.data as hb_data

    names = ["good0", "bad", "good1"]
    with caplog.at_level(logging.ERROR, logger="hbcore_tf.data"):
        got = as_lists(hb_data.ParquetDataset(
            [files[n] for n in names], BATCH, skip_corrupted_data=True))
    assert got == expected_batches(readable_tables(files, names))
    ids = [i for b in got for i in b["id"]]
    assert not set(range(110, 120)) & set(ids)  # row group 1 of bad
    assert len(ids) == 25 + 20 + 12
    logged = [r.getMessage() for r in caplog.records
              if r.name == "hbcore_tf.data"]
    assert len(logged) == 1, logged
    assert "row group 1 (10 rows) of %s" % files["bad"] in logged[0]


def test_positional_argument_order_is_hybridbackends(files):
    """HybridBackend's order: (filenames, batch_size, fields,
    partition_count, partition_index, skip_corrupted_data, drop_remainder,
    ...)."""
    import hbcore_tf.data as hb_data

    got = as_lists(hb_data.ParquetDataset([files["bad"]], BATCH, None, 1, 0,
                                          True, True))
    want = [b for b in expected_batches(readable_tables(files, ["bad"]))
            if len(b["id"]) == BATCH]
    assert got == want


def test_without_the_flag_iterating_fails_naming_file_and_row_group(files):
    import tensorflow as tf

    import hbcore_tf.data as hb_data

    ds = hb_data.ParquetDataset([files["good0"], files["bad"]], BATCH)
    it = iter(ds)
    # good0 and the first row group of bad come out before the failure.
    before = [next(it)["id"].numpy().tolist() for _ in range(4)]
    assert before == [list(range(s, min(s + BATCH, 25)))
                      for s in range(0, 25, BATCH)]
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        while True:
            next(it)
    message = str(info.value)
    assert "ValueError: ParquetDataset: cannot read row group 1 (10 rows) " \
           "of %s" % files["bad"] in message
    assert "skip_corrupted_data=True" in message


@pytest.mark.parametrize("skip", [False, True])
def test_truncated_file_fails_naming_it(files, skip):
    """A file whose footer is gone cannot be opened: HybridBackend fails on
    it whatever skip_corrupted_data says, and so does hbcore (when the
    dataset is built, as it reads every file's footer then)."""
    import hbcore_tf.data as hb_data

    with pytest.raises(ValueError) as info:
        hb_data.ParquetDataset([files["good0"], files["truncated"]], BATCH,
                               skip_corrupted_data=skip)
    assert "%s is not a readable Parquet file" % files["truncated"] \
        in str(info.value)


def test_dataset_of_filenames_and_parallel_reads(files):
    import tensorflow as tf

    import hbcore_tf.data as hb_data

    names = ["good0", "bad", "good1"]
    fields = hb_data.ParquetDataset.read_schema(files["good0"])
    paths = tf.data.Dataset.from_tensor_slices([files[n] for n in names])
    got = as_lists(paths.apply(hb_data.read_parquet(
        BATCH, fields=fields, skip_corrupted_data=True)))
    assert got == expected_batches(readable_tables(files, names))
    parallel = as_lists(hb_data.ParquetDataset(
        [files[n] for n in names], BATCH, skip_corrupted_data=True,
        num_parallel_reads=2))
    assert sorted(i for b in parallel for i in b["id"]) == \
        sorted(i for b in got for i in b["id"])


def test_partitions_of_a_corrupted_file(files):
    """One file, three partitions: each reads one row group; the partition
    holding the unreadable one yields nothing, the others their rows."""
    import hbcore_tf.data as hb_data

    parts = [as_lists(hb_data.ParquetDataset(
        files["bad"], BATCH, partition_count=3, partition_index=k,
        skip_corrupted_data=True)) for k in range(3)]
    ids = [[i for b in part for i in b["id"]] for part in parts]
    assert ids == [list(range(100, 110)), [], list(range(120, 130))]


def test_skip_corrupted_data_must_be_a_bool(files):
    import hbcore_tf.data as hb_data

    with pytest.raises(TypeError, match="skip_corrupted_data must be a bool"):
        hb_data.ParquetDataset(files["good0"], BATCH,
                               skip_corrupted_data="yes")
