"""hb.data.ParquetDataset cases, run on every rank of an hbrun launch.

Every rank writes the same Parquet files (a fixed seed) into its own
directory under $HB_TEST_OUT, reads them back and compares with the numpy
data it wrote: values, dtypes, batching, field selection and typing,
ragged and sparse list columns, partitions (by files, by row groups, by
rows: every row read by exactly one partition), filenames as a dataset,
parallel reads, and errors by type and message. The "distributed" case
reads partition_index=rank of partition_count=size and gathers the row ids
of every rank: each row exactly once. Also: schemas that differ between
files or from a Field (errors at construction naming column and files),
dictionary columns, filenames as a tensor in v1 graphs and tf.function,
parallelism arguments, partitions under hb.data.synchronized, and
hb.data.rebatch. Run by tests/tf/test_hb_parquet.py.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import OUT_DIR
from train_common import (Checker, check, close, expect_raises, list_rows,
                          report, run_table, tf)

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
    "schema/list-vs-scalar", "schema/string-vs-number",
    "schema/dtype-differs", "fields/string-cast", "fields/single",
    "dictionary-columns", "filenames-tensor/graph",
    "filenames-tensor/tf-function", "filenames-dataset/field-mismatch",
    "errors/dataset-of-non-strings", "errors/not-parquet",
    "parallel-arguments", "distributed-synchronized", "rebatch",
    "errors/rebatch-arguments",
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
            if isinstance(value, hb_data.DataFrame.Value):
                out.setdefault(key, []).extend(list_rows(value))
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
            got = tf.nest.flatten(spec[key])[0].dtype
            check(got == dtype, "%s: dtype %s" % (key, spec[key]))
        check(isinstance(spec["tags"], hb_data.DataFrame.Value) and
              spec["tags"].values.dtype == tf.int64 and
              [s.dtype for s in spec["tags"].nested_row_splits] == [tf.int32],
              "tags: %s" % (spec["tags"],))
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
        expect_raises(lambda: hb_data.DataFrame.Field("x", ragged_rank=-1),
                      ValueError, "ragged_rank")
        expect_raises(lambda: make(self.paths, 2, fields=[]), ValueError,
                      "no columns")

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


    # --- schemas that differ between files, Fields that disagree ----------

    def _write(self, name: str, columns: dict) -> str:
        path = os.path.join(self.dir, name)
        pq.write_table(pa.table(columns), path)
        return path

    def schema_list_vs_scalar(self) -> None:
        # "tags" is a list column in one file and a scalar column in the
        # next: an error at construction naming the column and both files
        # (not an AttributeError from pyarrow when the batch is read).
        scalar = self._write("tags-scalar.parquet", {
            "id": pa.array([100, 101], pa.int64()),
            "tags": pa.array([7, 8], pa.int64())})
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            [self.paths[0], scalar], 4, fields=["id", "tags"]),
            ValueError, "'tags'")
        for part in (self.paths[0], scalar, "list", "scalar"):
            check(part in str(exc), "%r not in %s" % (part, exc))

    def schema_string_vs_number(self) -> None:
        strings = self._write("id-strings.parquet", {
            "id": pa.array(["a", "b"])})
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            [self.paths[0], strings], 4, fields=["id"]), ValueError, "'id'")
        for part in (self.paths[0], strings, "string", "int64"):
            check(part in str(exc), "%r not in %s" % (part, exc))

    def schema_dtype_differs(self) -> None:
        # int64 ids in the first file, int32 in the second: no silent cast
        # to the first file's dtype (which could truncate); a Field with a
        # dtype casts both.
        big = np.array([2 ** 40, 5], np.int64)
        small = self._write("v-int32.parquet", {"v": pa.array(
            np.array([1, 2, 3], np.int32))})
        large = self._write("v-int64.parquet", {"v": pa.array(big)})
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            [small, large], 4), ValueError, "'v'")
        for part in (small, large, "int32", "int64", "DataFrame.Field"):
            check(part in str(exc), "%r not in %s" % (part, exc))
        ds = hb_data.ParquetDataset(
            [small, large], 4, fields=[hb_data.DataFrame.Field("v", tf.int64)])
        got = [int(v) for b in ds for v in b["v"].numpy()]
        check(got == [1, 2, 3] + big.tolist(), "cast values %s" % got)

    def fields_string_cast(self) -> None:
        Field = hb_data.DataFrame.Field
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            self.paths[0], 4, fields=[Field("id", tf.string)]),
            ValueError, "'id'")
        check("int64" in str(exc) and self.paths[0] in str(exc),
              "type or file not named: %s" % exc)
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            self.paths[0], 4, fields=[Field("name", tf.int64)]),
            ValueError, "'name'")
        check("string" in str(exc), "type not named: %s" % exc)

    def fields_single(self) -> None:
        # One column given as a bare name or Field, not a list of them.
        rows = ROWS_PER_FILE[0]
        for fields in ("id", hb_data.DataFrame.Field("id", tf.int32)):
            ds = hb_data.ParquetDataset(self.paths[0], 8, fields=fields)
            check(list(ds.element_spec) == ["id"],
                  "fields=%r gave %s" % (fields, list(ds.element_spec)))
            check(ids_of(ds) == list(range(rows)), "ids for %r" % (fields,))

    def dictionary_columns(self) -> None:
        # Dictionary-encoded columns (pandas categoricals, dictionary_encode)
        # read as their values.
        # Row groups of 2 rows, batches of 3: a batch joins row groups
        # whose dictionaries differ.
        names = ["a", "bb", "a", "c", "bb"]
        path = os.path.join(self.dir, "dict.parquet")
        pq.write_table(pa.table({
            "cat": pa.array(names).dictionary_encode(),
            "code": pa.array([3, 1, 3, 2, 1], pa.int64()).dictionary_encode()}),
            path, row_group_size=2)
        ds = hb_data.ParquetDataset(path, 3)
        check(ds.element_spec["cat"].dtype == tf.string and
              ds.element_spec["code"].dtype == tf.int64,
              "spec %s" % ds.element_spec)
        got = read_all(ds)
        check([s.decode() for s in got["cat"]] == names, "cat %s" % got)
        check(got["code"] == [3, 1, 3, 2, 1], "code %s" % got)

    def filenames_tensor_graph(self) -> None:
        # A tf.string tensor of filenames in a tf.compat.v1 graph: a constant
        # reads like a list; a placeholder (typed fields) like a dataset.
        Field = hb_data.DataFrame.Field
        n = ROWS_PER_FILE[0] + ROWS_PER_FILE[1]
        with tf.Graph().as_default():
            ds = hb_data.ParquetDataset(tf.constant(self.paths[:2]), 8,
                                        fields=["id"])
            batch = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
            files = tf.compat.v1.placeholder(tf.string, [None])
            fed = hb_data.ParquetDataset(
                files, 8, fields=[Field("id", tf.int64, ragged_rank=0)])
            it = tf.compat.v1.data.make_initializable_iterator(fed)
            fed_batch = it.get_next()
            with tf.compat.v1.Session() as sess:
                ids = []
                while True:
                    try:
                        ids += sess.run(batch)["id"].tolist()
                    except tf.errors.OutOfRangeError:
                        break
                check(ids == list(range(n)), "constant tensor ids")
                sess.run(it.initializer, {files: self.paths[1:2]})
                ids = []
                while True:
                    try:
                        ids += sess.run(fed_batch)["id"].tolist()
                    except tf.errors.OutOfRangeError:
                        break
                first = ROWS_PER_FILE[0]
                check(ids == list(range(first, n)), "fed tensor ids")

    def filenames_tensor_tf_function(self) -> None:
        Field = hb_data.DataFrame.Field
        typed = [Field("id", tf.int64, ragged_rank=0)]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def total(files):
            out = tf.constant(0, tf.int64)
            for b in hb_data.ParquetDataset(files, 8, fields=typed):
                out += tf.reduce_sum(b["id"])
            return out

        n = sum(ROWS_PER_FILE[:3])
        check(int(total(tf.constant(self.paths[:3]))) == n * (n - 1) // 2,
              "sum of ids in tf.function")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def untyped(files):
            return hb_data.ParquetDataset(files, 8, fields=["id"])

        expect_raises(lambda: untyped.get_concrete_function(), ValueError,
                      "dtype and ragged_rank")

    def filenames_dataset_field_mismatch(self) -> None:
        Field = hb_data.DataFrame.Field
        scalar = self._write("tags-scalar2.parquet", {
            "tags": pa.array([7, 8], pa.int64())})
        names = tf.data.Dataset.from_tensor_slices([scalar])
        ds = hb_data.ParquetDataset(names, 4, fields=[
            Field("tags", tf.int64, ragged_rank=1)])
        exc = expect_raises(lambda: list(ds), tf.errors.InvalidArgumentError,
                            "'tags'")
        check(scalar in str(exc) and "ragged_rank=1" in str(exc),
              "file or Field not named: %s" % str(exc)[:500])
        strings = self._write("tags-strings.parquet", {
            "tags": pa.array(["x", "y"])})
        ds = hb_data.ParquetDataset(
            tf.data.Dataset.from_tensor_slices([strings]), 4,
            fields=[Field("tags", tf.int64, ragged_rank=0)])
        exc = expect_raises(lambda: list(ds), tf.errors.InvalidArgumentError,
                            "'tags'")
        check(strings in str(exc), "file not named: %s" % str(exc)[:500])

    def dataset_of_non_strings(self) -> None:
        Field = hb_data.DataFrame.Field
        expect_raises(lambda: hb_data.ParquetDataset(
            tf.data.Dataset.range(3), 4,
            fields=[Field("id", tf.int64, ragged_rank=0)]),
            TypeError, "tf.string")
        expect_raises(lambda: hb_data.ParquetDataset(
            tf.constant([1, 2]), 4), TypeError, "tf.string")

    def not_parquet(self) -> None:
        junk = os.path.join(self.dir, "junk.parquet")
        with open(junk, "w") as f:
            f.write("not a parquet file")
        exc = expect_raises(lambda: hb_data.ParquetDataset(
            [self.paths[0], junk], 4), ValueError, junk)
        check("parquet" in str(exc).lower(), "%s" % exc)

    def parallel_arguments(self) -> None:
        make = hb_data.ParquetDataset
        for bad in (0, -5, 1.5):
            expect_raises(lambda: make(self.paths, 4, num_parallel_reads=bad),
                          ValueError, "num_parallel_reads")
        expect_raises(lambda: make(self.paths, 4, num_parallel_reads=2,
                                   num_sequential_reads=0),
                      ValueError, "num_sequential_reads")
        expect_raises(lambda: make(self.paths, 4,
                                   num_parallel_parser_calls=0),
                      ValueError, "num_parallel_parser_calls")
        # HybridBackend's AUTOTUNE and num_parallel_parser_calls.
        total = list(range(sum(ROWS_PER_FILE)))
        for kwargs in ({"num_parallel_reads": tf.data.AUTOTUNE},
                       {"num_parallel_parser_calls": 1},
                       {"num_parallel_parser_calls": tf.data.AUTOTUNE,
                        "num_parallel_reads": 2}):
            ids = ids_of(make(self.paths, 4, fields=["id"], **kwargs))
            check(sorted(ids) == total, "rows with %s" % kwargs)

    def distributed_synchronized(self) -> None:
        # Partitions by files hold different numbers of batches; with data
        # sync every rank runs the same number of steps (no hang) and
        # drop_remainder=False still reads every row exactly once.
        mine = hb_data.ParquetDataset(
            self.paths, 4, fields=["id"], partition_count=hb.size(),
            partition_index=hb.rank())
        counts = hbcore.allgather_object(len(list(mine)))
        for drop in (True, False):
            ids, steps = [], 0
            for batch in hb_data.synchronized(mine, drop_remainder=drop):
                ids += batch["id"].numpy().tolist()
                steps += 1
            want = min(counts) if drop else max(counts)
            check(steps == want, "drop_remainder=%s: %d steps, expected %d"
                  % (drop, steps, want))
            if not drop:
                everyone = hbcore.allgather_object(ids)
                merged = sorted(i for part in everyone for i in part)
                check(merged == list(range(sum(ROWS_PER_FILE))),
                      "synchronized partitions lost or repeated rows")

    def rebatch(self) -> None:
        # hb.data.rebatch joins the short last batches of the files:
        # batches of exactly 10 rows across file boundaries, every row in
        # order, dense, ragged and sparse columns alike.
        # hb.data.RebatchDataset(ds, ...) is the same as ds.apply(...).
        Field = hb_data.DataFrame.Field
        total = sum(ROWS_PER_FILE)
        for drop, form in ((False, "apply"), (True, "apply"),
                           (True, "RebatchDataset")):
            source = hb_data.ParquetDataset(
                self.paths, 7, fields=["id", "tags",
                                       Field("vec", sparse=True)])
            ds = source.apply(hb_data.rebatch(
                10, min_batch_size=5, drop_remainder=drop)) \
                if form == "apply" else hb_data.RebatchDataset(
                    source, 10, min_batch_size=5, drop_remainder=drop)
            sizes, ids, tags, vec = [], [], [], []
            for b in ds:
                sizes.append(int(b["id"].shape[0]))
                ids += b["id"].numpy().tolist()
                tags += list_rows(b["tags"])
                dense = tf.sparse.to_dense(b["vec"]).numpy()
                width = dense.shape[1]
                check(int(b["vec"].dense_shape[0]) == sizes[-1],
                      "sparse batch rows")
                vec += [row for row in dense]
                check(width == max([len(v) for v in
                                    self.expected["vec"][ids[-sizes[-1]]:
                                                         ids[-1] + 1]]
                                   + [0]), "sparse width %d" % width)
            rows = total // 10 * 10 if drop else total
            want = [10] * (total // 10) + \
                ([] if drop or total % 10 == 0 else [total % 10])
            check(sizes == want, "%s drop=%s sizes %s, expected %s" % (
                form, drop, sizes, want))
            check(ids == list(range(rows)), "ids drop=%s" % drop)
            check(tags == [list(map(int, t))
                           for t in self.expected["tags"][:rows]], "tags")
            for i, (got, exp) in enumerate(zip(vec, self.expected["vec"])):
                close(got[:len(exp)], np.asarray(exp, np.float64),
                      "vec row %d" % i)
                check(not np.any(got[len(exp):]), "vec row %d padding" % i)

    def rebatch_arguments(self) -> None:
        expect_raises(lambda: hb_data.rebatch(0), ValueError, "batch_size")
        expect_raises(lambda: hb_data.rebatch(4, min_batch_size=8),
                      ValueError, "min_batch_size")
        ds = hb_data.ParquetDataset(self.paths[0], 4, fields=["id", "tags"])
        expect_raises(lambda: ds.apply(hb_data.rebatch(8, fields=["id"])),
                      ValueError, "fields")


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
