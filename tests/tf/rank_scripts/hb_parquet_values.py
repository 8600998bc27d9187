"""hb.data's HybridBackend list-column semantics, run on every rank of an
hbrun launch: list columns as DataFrame.Value (lists, lists of lists,
string lists), fixed-length lists (Field shape=[n]), DataFrame.to_sparse /
unbatch_and_to_sparse in all their forms, rebatch of Values, feedable v1
iterators, Values under data sync (empty batches, step weight) and the
errors of Fields that do not fit the data. Every rank writes rank-seeded
files; expected values come from the Python lists it wrote (numpy), never
from hbcore. Run by tests/tf/test_hb_parquet_values.py.
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

V1 = tf.compat.v1
Field = hb.data.DataFrame.Field
Value = hb.data.DataFrame.Value
CASES = ["values", "to-sparse", "unbatch-and-to-sparse", "fixed-shape",
         "rebatch", "feedable-iterator", "synchronized", "errors"]
ROWS = [13, 9]        # rows of the two files (row groups of 5)
LISTS = ["tags", "paths", "words"]
DEPTH = {"tags": 1, "paths": 2, "words": 1}   # list levels of each column


def rows_of(rank: int, index: int, rows: int, first: int) -> dict:
    rng = np.random.default_rng([11, rank, index])

    def ints(n: int) -> list:
        return [int(v) for v in rng.integers(0, 1000, size=n)]

    return {
        "id": list(range(first, first + rows)),
        "tags": [ints(rng.integers(0, 4)) for _ in range(rows)],
        "paths": [[ints(rng.integers(0, 4)) for _ in range(rng.integers(0, 3))]
                  for _ in range(rows)],
        "words": [["w%d" % v for v in ints(rng.integers(0, 4))]
                  for _ in range(rows)],
        "emb": [[float(v) for v in rng.normal(size=4)] for _ in range(rows)],
        "empty": [[] for _ in range(rows)],
    }


def write(path: str, data: dict) -> None:
    pq.write_table(pa.table({
        "id": pa.array(data["id"], pa.int64()),
        "tags": pa.array(data["tags"], pa.list_(pa.int64())),
        "paths": pa.array(data["paths"], pa.list_(pa.list_(pa.int32()))),
        "words": pa.array(data["words"], pa.list_(pa.string())),
        "emb": pa.array(data["emb"], pa.list_(pa.float32())),
        "empty": pa.array(data["empty"], pa.list_(pa.int64()))}),
        path, row_group_size=5)


def sparse_of(rows: list, depth: int) -> tuple:
    """(indices, values, dense_shape) of a batch of lists nested ``depth``
    levels deep."""
    indices, values, shape = [], [], [len(rows)] + [0] * depth

    def walk(node: list, prefix: list, depth: int) -> None:
        shape[depth] = max(shape[depth], len(node))
        for j, item in enumerate(node):
            if isinstance(item, list):
                walk(item, prefix + [j], depth + 1)
            else:
                indices.append(prefix + [j])
                values.append(item)

    for i, row in enumerate(rows):
        walk(row, [i], 1)
    return indices, values, shape


def check_sparse(got, rows: list, depth: int, what: str) -> None:
    check(isinstance(got, tf.SparseTensor), "%s: %r" % (what, type(got)))
    indices, values, shape = sparse_of(rows, depth)
    check(got.indices.numpy().tolist() == indices, what + " indices")
    check(got.dense_shape.numpy().tolist() == shape,
          "%s dense_shape %s, expected %s" % (what, got.dense_shape, shape))
    got_values = got.values.numpy().tolist()
    if got.values.dtype == tf.string:
        got_values = [v.decode() for v in got_values]
    check(got_values == values, what + " values")


def decoded(rows: list) -> list:
    return [[w.decode() for w in row] for row in rows]


class Cases:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.dir = os.path.join(OUT_DIR or "/tmp", "values-rank%d" % rank)
        os.makedirs(self.dir, exist_ok=True)
        self.paths, self.data = [], {}
        for index, rows in enumerate(ROWS):
            data = rows_of(rank, index, rows, sum(ROWS[:index]))
            path = os.path.join(self.dir, "part-%d.parquet" % index)
            write(path, data)
            self.paths.append(path)
            for key, column in data.items():
                self.data.setdefault(key, []).extend(column)

    def rows(self, key: str, ids) -> list:
        return [self.data[key][int(i)] for i in np.asarray(ids)]

    def values(self) -> None:
        ds = hb.data.ParquetDataset(self.paths, 6, fields=["id"] + LISTS)
        spec = ds.element_spec
        for key, dtype, levels in (("tags", tf.int64, 1),
                                   ("paths", tf.int32, 2),
                                   ("words", tf.string, 1)):
            check(isinstance(spec[key], Value) and
                  spec[key].values.dtype == dtype and
                  [s.dtype for s in spec[key].nested_row_splits] ==
                  [tf.int32] * levels, "%s spec %s" % (key, spec[key]))
        seen = []
        for batch in ds:
            ids = batch["id"].numpy()
            seen += ids.tolist()
            for key in LISTS:
                rows = self.rows(key, ids)
                got = list_rows(batch[key])
                if key == "words":
                    got = decoded(got)
                check(got == rows, "%s rows of batch %s" % (key, ids[:2]))
                # Splits start at 0 (a batch slices its file, whose Arrow
                # offsets do not) and end at the count of the level below.
                splits = batch[key].nested_row_splits[0].numpy()
                check(splits[0] == 0 and splits[-1] == sum(map(len, rows)),
                      "%s splits %s" % (key, splits))
        check(seen == list(range(sum(ROWS))), "ids %s" % seen)

    def to_sparse(self) -> None:
        make = lambda fields=None: hb.data.ParquetDataset(  # noqa: E731
            self.paths, 6, fields=fields or ["id"] + LISTS)
        forms = {
            "DataFrame.to_sparse": make().map(hb.data.DataFrame.to_sparse),
            "apply(to_sparse())": make().apply(hb.data.to_sparse()),
            "map(to_sparse)": make().map(hb.data.to_sparse),
            "Value.to_sparse": make().map(lambda b: dict(
                b, **{k: b[k].to_sparse() for k in LISTS})),
            "Field(sparse=True)": make(["id"] + [Field(k, sparse=True)
                                                 for k in LISTS]),
        }
        for what, ds in forms.items():
            for batch in ds:
                ids = batch["id"].numpy()
                check(isinstance(batch["id"], tf.Tensor), what + " id dense")
                for key in LISTS:
                    rows = self.rows(key, ids)
                    check_sparse(batch[key], rows, DEPTH[key],
                                 "%s %s" % (what, key))

    def unbatch_and_to_sparse(self) -> None:
        fields = ["id", "tags", "paths", Field("emb", shape=[4])]
        one = hb.data.ParquetDataset(self.paths, fields=fields)
        for what, ds in (
                ("apply", one.apply(hb.data.unbatch_and_to_sparse())),
                ("map", one.map(hb.data.DataFrame.unbatch_and_to_sparse))):
            for row in ds.take(8):
                i = int(row["id"].numpy()[0])
                check(row["id"].shape == [1], what + " id keeps [1]")
                close(row["emb"], [self.data["emb"][i]], what + " emb [1, 4]")
                for key in ("tags", "paths"):
                    # The row alone: sparse_of's leading batch index dropped.
                    indices, values, shape = sparse_of([self.data[key][i]],
                                                       DEPTH[key])
                    got = row[key]
                    check(got.indices.numpy().tolist() ==
                          [x[1:] for x in indices] and
                          got.values.numpy().tolist() == values and
                          got.dense_shape.numpy().tolist() == shape[1:],
                          "%s %s row %d: %s" % (what, key, i, got))
        three = hb.data.ParquetDataset(self.paths, 3, fields=["tags"])
        expect_raises(lambda: list(three.apply(
            hb.data.unbatch_and_to_sparse())), tf.errors.InvalidArgumentError,
            "column tags holds more than one row")

    def fixed_shape(self) -> None:
        ds = hb.data.ParquetDataset(self.paths, 6,
                                    fields=["id", Field("emb", shape=[4])])
        check(ds.element_spec["emb"].values.shape.as_list() == [None, 4],
              "emb spec %s" % (ds.element_spec["emb"],))
        dense = hb.data.ParquetDataset(self.paths, 6, fields=[
            "id", Field("emb", tf.float64, ragged_rank=0, shape=[2, 2])])
        check(isinstance(dense.element_spec["emb"], tf.TensorSpec) and
              dense.element_spec["emb"].shape.as_list() == [None, 2, 2],
              "ragged_rank=0 spec %s" % (dense.element_spec["emb"],))
        for what, source, sizes in (
                ("read", ds, None),
                ("rebatch", ds.apply(hb.data.rebatch(10)), [10, 10, 2])):
            got_sizes = []
            for batch in source:
                ids = batch["id"].numpy()
                got_sizes.append(len(ids))
                want = np.array(self.rows("emb", ids), np.float32)
                emb = batch["emb"]
                close(emb.values, want, "%s emb values" % what)
                close(emb.nested_row_splits[0], np.arange(len(ids) + 1) * 4,
                      "%s emb splits" % what)
                close(hb.data.DataFrame.to_sparse(batch)["emb"], want,
                      "%s to_sparse keeps it dense" % what)
            check(sizes is None or got_sizes == sizes,
                  "%s sizes %s" % (what, got_sizes))
        for batch in dense:
            want = np.array(self.rows("emb", batch["id"]), np.float64)
            close(batch["emb"], want.reshape([-1, 2, 2]), "[batch, 2, 2]")

    def rebatch(self) -> None:
        ds = hb.data.ParquetDataset(self.paths, 4, fields=["id"] + LISTS)
        out = ds.apply(hb.data.rebatch(10))
        check(out.element_spec == ds.element_spec,
              "spec changed: %s" % (out.element_spec,))
        sizes, ids = [], []
        for batch in out:
            batch_ids = batch["id"].numpy()
            sizes.append(len(batch_ids))
            ids += batch_ids.tolist()
            for key in LISTS:
                got = list_rows(batch[key])
                got = decoded(got) if key == "words" else got
                check(got == self.rows(key, batch_ids), key + " rebatched")
        check(sizes == [10, 10, 2] and ids == list(range(sum(ROWS))),
              "sizes %s" % sizes)

    def feedable_iterator(self) -> None:
        makers = {"one-shot": hb.data.make_one_shot_iterator,
                  "initializable": hb.data.make_initializable_iterator}
        for name, maker in makers.items():
            for sparse in (False, True):
                what = "%s sparse=%s" % (name, sparse)
                with tf.Graph().as_default():
                    ds = hb.data.ParquetDataset(self.paths, 6,
                                                fields=["id", "tags", "paths"])
                    if sparse:
                        ds = ds.apply(hb.data.to_sparse())
                    it = maker(ds)
                    for attr in ("output_types", "output_shapes",
                                 "output_classes"):
                        want = getattr(V1.data, "get_" + attr)(ds)
                        check(str(getattr(it, attr)) == str(want),
                              "%s %s: %s" % (what, attr, getattr(it, attr)))
                    handle = V1.placeholder(tf.string, [])
                    fed = V1.data.Iterator.from_string_handle(
                        handle, it.output_types, it.output_shapes,
                        it.output_classes).get_next()
                    with V1.Session() as sess:
                        if name == "initializable":
                            sess.run(it.initializer)
                        value = sess.run(it.string_handle())
                        ids = []
                        while True:
                            try:
                                batch = sess.run(fed, {handle: value})
                            except tf.errors.OutOfRangeError:
                                break
                            ids += batch["id"].tolist()
                            tags = self.rows("tags", batch["id"])
                            if sparse:
                                got = batch["tags"]
                                check(got.values.tolist() == sum(tags, []),
                                      what + " sparse tags")
                            else:
                                check(list_rows(batch["tags"]) == tags and
                                      list_rows(batch["paths"]) ==
                                      self.rows("paths", batch["id"]),
                                      what + " tags and paths")
                check(ids == list(range(sum(ROWS))), "%s ids" % what)

    def synchronized(self) -> None:
        # Rank r reads 4r + 3 rows in batches of 4: ranks hold different
        # numbers of batches. "empty" (every list empty) sorts first, so
        # the step weight must count its rows, not its items.
        rows = 4 * self.rank + 3
        path = os.path.join(self.dir, "sync.parquet")
        write(path, rows_of(self.rank, 9, rows, 0))
        counts = hbcore.allgather_object(-(-rows // 4))
        fields = ["empty", "id", "tags"]
        for drop in (True, False):
            ds = hb.data.synchronized(
                hb.data.ParquetDataset(path, 4, fields=fields), drop)
            steps, ids = 0, []
            for batch in ds:
                steps += 1
                n = len(batch["id"])
                ids += batch["id"].numpy().tolist()
                check(float(hb.data.batch_weight(batch)) == float(n > 0),
                      "weight of a batch of %d rows" % n)
                check(batch["tags"].nested_row_splits[0].shape == [n + 1],
                      "tags splits of %d rows" % n)
                check_sparse(hb.data.DataFrame.to_sparse(batch)["tags"],
                             list_rows(batch["tags"]), 1, "synced to_sparse")
            want = min(counts) if drop else max(counts)
            check(steps == want, "drop=%s: %d steps, expected %d" % (
                drop, steps, want))
            if not drop:
                check(ids == list(range(rows)), "every row once: %s" % ids)
        with tf.Graph().as_default():
            it = hb.data.make_one_shot_iterator(hb.data.ParquetDataset(
                path, 4, fields=fields), drop_remainder=False)
            batch = it.get_next()
            with V1.Session() as sess:
                steps = 0
                while True:
                    try:
                        sess.run(batch)
                    except tf.errors.OutOfRangeError:
                        break
                    steps += 1
        check(steps == max(counts), "v1 steps %d" % steps)

    def errors(self) -> None:
        make = lambda fields, paths=None: hb.data.ParquetDataset(  # noqa
            paths or self.paths, 4, fields=fields)
        exc = expect_raises(lambda: make([Field("tags", ragged_rank=0)]),
                            ValueError, "column 'tags'")
        for part in (self.paths[0], "list column", "ragged_rank=0",
                     "shape=[n]"):
            check(part in str(exc), "%r not in %s" % (part, exc))
        exc = expect_raises(lambda: make([Field("id", shape=[2])]),
                            ValueError, "column 'id'")
        check("scalar column" in str(exc) and "shape=[2]" in str(exc),
              str(exc))
        exc = expect_raises(lambda: make([Field("paths", shape=[2])]),
                            ValueError, "column 'paths'")
        check("nested list (ragged_rank=2)" in str(exc), str(exc))
        # Rows of 0 to 3 tags read as shape=[3]: the first batch holding a
        # row of another length fails, naming that row of the file.
        bad = next(i for i, t in enumerate(self.data["tags"]) if len(t) != 3)
        exc = expect_raises(lambda: list(make([Field("tags", shape=[3])])),
                            tf.errors.InvalidArgumentError, "column 'tags'")
        want = "row %d holds %d items, but its DataFrame.Field gives " \
            "shape=[3]" % (bad, len(self.data["tags"][bad]))
        check(want in str(exc) and self.paths[0] in str(exc),
              "%r not in %s" % (want, str(exc)[:600]))
        expect_raises(lambda: Field("x", shape=[None, 2]), ValueError,
                      "incomplete shape")
        expect_raises(lambda: Field("x", ragged_rank=2, shape=[2]),
                      ValueError, "nested list")
        expect_raises(lambda: Field("x", shape=[2], sparse=True), ValueError,
                      "cannot be combined")
        expect_raises(lambda: hb.data.DataFrame.to_sparse({"a": 3}),
                      ValueError, "column 'a' is a int")
        # A column that nests one level deeper in the second file.
        deeper = os.path.join(self.dir, "deeper.parquet")
        pq.write_table(pa.table({"tags": pa.array(
            [[[1]], [[2, 3]]], pa.list_(pa.list_(pa.int64())))}), deeper)
        exc = expect_raises(lambda: make(["tags"], [self.paths[0], deeper]),
                            ValueError, "column 'tags'")
        for part in (self.paths[0], deeper, "nested list (ragged_rank=2)"):
            check(part in str(exc), "%r not in %s" % (part, exc))


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    cases = Cases(rank, size)
    table = {name: getattr(cases, name.replace("-", "_")) for name in CASES}
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
