"""hb.data.ParquetDataset cases, run on every rank of an hbrun launch.

Every rank writes the same Parquet files (a fixed seed) into its own
directory under $HB_TEST_OUT, reads them back and compares with the numpy
data it wrote: values, dtypes, batching, field selection and typing,
ragged and sparse list columns, partitions (by files, by row groups, by
rows: every row read by exactly one partition), filenames as a dataset,
parallel reads, and errors by type and message. The "distributed" case
reads partition_index=rank of partition_count=size and gathers the row ids
of every rank: each row exactly once. Run by tests/tf/test_hb_parquet.py.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import OUT_DIR
from train_common import (Checker, check, close, expect_raises, report,
                          run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
import hbcore_tf.data as hb_data  # noqa: E402

CASES = [
    "values", "batching", "drop-remainder", "fields", "sparse",
    "partitions/files", "partitions/row-groups", "partitions/rows",
    "filenames-dataset", "parallel-reads",
    "errors/missing-file", "errors/missing-column",
    "errors/unsupported-type", "errors/nulls", "errors/arguments",
    "errors/untyped-dataset-fields", "distributed",
]
ROWS_PER_FILE = [23, 17, 30, 9, 21]


def table_data(file_index: int, rows: int) -> dict:
    rng = np.random.default_rng([7, file_index])
    first = sum(ROWS_PER_FILE[:file_index])
    lengths = rng.integers(0, 4, size=rows)
    return {
        "id": np.arange(first, first + rows, dtype=np.int64),
        "small": rng.integers(-100, 100, size=rows).astype(np.int32),
        "score": rng.normal(size=rows).astype(np.float64),
        "weight": rng.uniform(size=rows).astype(np.float32),
        "flag": rng.integers(0, 2, size=rows).astype(bool),
        "name": np.array(["n%d" % i for i in range(first, first + rows)],
                         dtype=object),
        "tags": [list(rng.integers(0, 1000, size=n)) for n in lengths],
        "vec": [list(rng.normal(size=n).astype(np.float32)) for n in lengths],
    }


def arrow_table(data: dict) -> pa.Table:
    columns = dict(data)
    columns["tags"] = pa.array(data["tags"], pa.list_(pa.int64()))
    columns["vec"] = pa.array(data["vec"], pa.list_(pa.float32()))
    return pa.table(columns)


def write_files(directory: str) -> list:
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, rows in enumerate(ROWS_PER_FILE):
        path = os.path.join(directory, "part-%d.parquet" % i)
        pq.write_table(arrow_table(table_data(i, rows)), path,
                       row_group_size=6)
        paths.append(path)
    return paths


def expected_all() -> dict:
    parts = [table_data(i, rows) for i, rows in enumerate(ROWS_PER_FILE)]
    return {k: sum((list(p[k]) for p in parts), []) for k in parts[0]}


def read_all(ds) -> dict:
    out = {}
    for batch in ds:
        for key, value in batch.items():
            if isinstance(value, tf.RaggedTensor):
                out.setdefault(key, []).extend(value.to_list())
            else:
                out.setdefault(key, []).extend(value.numpy().tolist())
    return out


def ids_of(ds) -> list:
    return [int(i) for batch in ds for i in batch["id"].numpy()]


class Cases:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.dir = os.path.join(OUT_DIR or "/tmp", "parquet-rank%d" % rank)
        self.paths = write_files(self.dir)
        self.expected = expected_all()

    def values(self) -> None:
        ds = hb_data.ParquetDataset(self.paths, batch_size=7)
        check(isinstance(ds, tf.data.Dataset), "not a tf.data.Dataset")
        spec = ds.element_spec
        want = {"id": tf.int64, "small": tf.int32, "score": tf.float64,
                "weight": tf.float32, "flag": tf.bool, "name": tf.string,
                "tags": tf.int64, "vec": tf.float32}
        check(list(spec) == list(want), "columns %s" % list(spec))
        for key, dtype in want.items():
            check(spec[key].dtype == dtype, "%s: dtype %s" % (key, spec[key]))
        check(isinstance(spec["tags"], tf.RaggedTensorSpec), "tags not ragged")
        got = read_all(ds)
        for key in ("id", "small", "flag"):
            check(got[key] == [x.item() if hasattr(x, "item") else x
                               for x in self.expected[key]], key)
        close(got["score"], self.expected["score"], "score")
        close(got["weight"], self.expected["weight"], "weight")
        check([s.decode() for s in got["name"]] == list(self.expected["name"]),
              "name")
        check(got["tags"] == [list(map(int, t)) for t in self.expected["tags"]],
              "tags")
        for row, (a, b) in enumerate(zip(got["vec"], self.expected["vec"])):
            close(np.asarray(a, np.float64), np.asarray(b, np.float64),
                  "vec row %d" % row)

    def batching(self) -> None:
        sizes = [int(b["id"].shape[0]) for b in
                 hb_data.ParquetDataset(self.paths, batch_size=7)]
        want = []
        for rows in ROWS_PER_FILE:
            want += [7] * (rows // 7) + ([rows % 7] if rows % 7 else [])
        check(sizes == want, "batch sizes %s, expected %s" % (sizes, want))

    def drop_remainder(self) -> None:
        ds = hb_data.ParquetDataset(self.paths, batch_size=7,
                                    drop_remainder=True)
        ids = ids_of(ds)
        want, first = [], 0
        for rows in ROWS_PER_FILE:
            want += list(range(first, first + rows // 7 * 7))
            first += rows
        check(ids == want, "ids with drop_remainder")

    def fields(self) -> None:
        Field = hb_data.DataFrame.Field
        ds = hb_data.ParquetDataset(
            self.paths[:2], batch_size=10,
            fields=["name", Field("score", tf.float32),
                    Field("id", tf.int32, ragged_rank=0)])
        check(list(ds.element_spec) == ["name", "score", "id"],
              "selected columns %s" % list(ds.element_spec))
        check(ds.element_spec["score"].dtype == tf.float32, "score cast")
        check(ds.element_spec["id"].dtype == tf.int32, "id cast")
        got = read_all(ds)
        rows = ROWS_PER_FILE[0] + ROWS_PER_FILE[1]
        close(got["score"], self.expected["score"][:rows], "score", rtol=1e-6)
        check(got["id"] == list(range(rows)), "id")

    def sparse(self) -> None:
        Field = hb_data.DataFrame.Field
        ds = hb_data.ParquetDataset(self.paths[0], batch_size=8,
                                    fields=["id", Field("tags", sparse=True)])
        check(isinstance(ds.element_spec["tags"], tf.SparseTensorSpec),
              "sparse=True gave %s" % ds.element_spec["tags"])
        ragged = hb_data.ParquetDataset(self.paths[0], batch_size=8,
                                        fields=["id", "tags"])
        for a, b in zip(ds, ragged.map(hb_data.to_sparse)):
            want = b["tags"]
            check(isinstance(want, tf.SparseTensor), "to_sparse")
            check(np.array_equal(a["tags"].indices, want.indices) and
                  np.array_equal(a["tags"].values, want.values) and
                  np.array_equal(a["tags"].dense_shape, want.dense_shape),
                  "sparse batch differs from to_sparse")

    def _partitions(self, paths: list, count: int) -> None:
        total = sum(len(pq.ParquetFile(p).read()) for p in paths)
        first_id = int(pq.ParquetFile(paths[0]).read()["id"][0].as_py())
        seen = []
        for index in range(count):
            part = ids_of(hb_data.ParquetDataset(
                paths, 4, fields=["id"], partition_count=count,
                partition_index=index))
            check(part == sorted(part), "partition %d not in order" % index)
            seen += part
        check(sorted(seen) == list(range(first_id, first_id + total)),
              "%d partitions of %d files: rows read %d times in all, "
              "expected each once" % (count, len(paths), len(seen)))

    def partitions_files(self) -> None:
        for count in (2, 3):
            self._partitions(self.paths, count)

    def partitions_row_groups(self) -> None:
        # 30 rows in row groups of 6: five row groups, split 2/2/1 in 3.
        for count in (2, 3):
            self._partitions(self.paths[2:3], count)

    def partitions_rows(self) -> None:
        path = os.path.join(self.dir, "one-group.parquet")
        pq.write_table(arrow_table(table_data(1, 17)), path)
        for count in (2, 3):
            self._partitions([path], count)

    def filenames_dataset(self) -> None:
        Field = hb_data.DataFrame.Field
        fields = [Field("id", tf.int64, ragged_rank=0),
                  Field("tags", tf.int64, ragged_rank=1)]
        names = tf.data.Dataset.from_tensor_slices(self.paths)
        ds = names.apply(hb_data.read_parquet(5, fields=fields))
        got = read_all(ds)
        check(got["id"] == list(range(sum(ROWS_PER_FILE))), "ids")
        check(got["tags"] == [list(map(int, t))
                              for t in self.expected["tags"]], "tags")
        sharded = ids_of(hb_data.ParquetDataset(
            names, 5, fields=fields, partition_count=2, partition_index=1))
        want = []
        for i in (1, 3):
            first = sum(ROWS_PER_FILE[:i])
            want += list(range(first, first + ROWS_PER_FILE[i]))
        check(sharded == want, "dataset filenames partitioned by files")

    def parallel_reads(self) -> None:
        ids = ids_of(hb_data.ParquetDataset(self.paths, 4, fields=["id"],
                                            num_parallel_reads=3,
                                            num_sequential_reads=2))
        check(sorted(ids) == list(range(sum(ROWS_PER_FILE))),
              "parallel reads lost or repeated rows")

    def missing_file(self) -> None:
        missing = os.path.join(self.dir, "missing.parquet")
        expect_raises(lambda: hb_data.ParquetDataset(
            [self.paths[0], missing], 4), FileNotFoundError, missing)

    def missing_column(self) -> None:
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            self.paths, 4, fields=["id", "clicks"]), ValueError, "'clicks'")
        check(self.paths[0] in str(exc), "file not named: %s" % exc)

    def unsupported_type(self) -> None:
        path = os.path.join(self.dir, "struct.parquet")
        pq.write_table(pa.table({"id": [1, 2], "pos": pa.array(
            [{"x": 1}, {"x": 2}])}), path)
        exc = expect_raises(lambda: hb_data.ParquetDataset(path, 2),
                            TypeError, "'pos'")
        check("struct" in str(exc), "type not named: %s" % exc)

    def nulls(self) -> None:
        path = os.path.join(self.dir, "nulls.parquet")
        pq.write_table(pa.table({"id": pa.array([1, None, 3], pa.int64())}),
                       path)
        ds = hb_data.ParquetDataset(path, 2)
        expect_raises(lambda: list(ds), Exception, "null values")

    def arguments(self) -> None:
        make = hb_data.ParquetDataset
        expect_raises(lambda: make(self.paths, 0), ValueError, "batch_size")
        expect_raises(lambda: make(self.paths, 2, partition_count=0),
                      ValueError, "partition_count")
        expect_raises(lambda: make(self.paths, 2, partition_count=2,
                                   partition_index=2),
                      ValueError, "partition_index")
        expect_raises(lambda: make(self.paths, 2, fields=[
            hb_data.DataFrame.Field("tags", ragged_rank=0)]),
            ValueError, "ragged_rank")
        expect_raises(lambda: hb_data.DataFrame.Field("x", ragged_rank=2),
                      ValueError, "ragged_rank")

    def untyped_dataset_fields(self) -> None:
        names = tf.data.Dataset.from_tensor_slices(self.paths)
        expect_raises(lambda: hb_data.ParquetDataset(names, 4, fields=["id"]),
                      ValueError, "dtype and ragged_rank")

    def distributed(self) -> None:
        mine = ids_of(hb_data.ParquetDataset(
            self.paths, 4, fields=["id"], partition_count=hb.size(),
            partition_index=hb.rank()))
        everyone = hbcore.allgather_object(mine)
        merged = sorted(i for part in everyone for i in part)
        check(merged == list(range(sum(ROWS_PER_FILE))),
              "ranks' partitions do not cover every row exactly once")
        check(all(part for part in everyone), "a rank read nothing")


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    cases = Cases(rank, size)
    table = {name: getattr(cases, name.replace("errors/", "").replace(
        "/", "_").replace("-", "_")) for name in CASES}
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
