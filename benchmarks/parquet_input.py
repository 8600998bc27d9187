"""Input throughput: hb.data.ParquetDataset against pyarrow -> pandas ->
tf.data.Dataset.from_tensor_slices, on the same generated files, one run.

    PYTHONPATH=. python benchmarks/parquet_input.py            # ~2 minutes
    PYTHONPATH=. python benchmarks/parquet_input.py --quick    # smoke run

Needs pyarrow (pip install ".[parquet]") and pandas (pip install pandas).

The files hold a recommender-like schema: 4 int64 id columns, 8 float32
features, a float32 label and a list<int64> column of 0-7 tags per row,
written as --files files of row groups of 64k rows. Each row of the table
reads every row of every file once, in batches of --batch-size, and
touches every tensor of every batch (the clock stops after the last
batch). Reported: the best of --repeats epochs, in rows per second, and
the ratio to the pandas reference of the same column set (above 1:
ParquetDataset is faster). The pandas path reads whole files into memory
first (what from_tensor_slices needs); ParquetDataset streams row groups.

Rows:
  scalar columns: the 13 scalar columns only (pandas gets plain numpy
    columns; the fairest case for it);
  with list column: the same plus the tags column (DataFrame.Value batches;
    pandas holds it as an object column of arrays, made ragged with
    tf.RaggedTensor.from_row_lengths before from_tensor_slices);
  ParquetDataset rows also run with num_parallel_reads=2.
"""
import argparse
import os
import sys
import tempfile
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import tensorflow as tf  # noqa: E402

import hbcore_tf.data as hb_data  # noqa: E402

SCALARS = (["user_id", "item_id", "shop_id", "category_id"]
           + ["f%d" % i for i in range(8)] + ["label"])


def write_files(directory: str, rows: int, files: int) -> List[str]:
    paths = []
    rng = np.random.default_rng(0)
    per_file = rows // files
    for index in range(files):
        columns: Dict[str, object] = {}
        for name in SCALARS[:4]:
            columns[name] = rng.integers(0, 10_000_000, size=per_file)
        for name in SCALARS[4:]:
            columns[name] = rng.uniform(size=per_file).astype(np.float32)
        lengths = rng.integers(0, 8, size=per_file)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = pa.array(rng.integers(0, 100_000, size=int(offsets[-1])))
        columns["tags"] = pa.ListArray.from_arrays(pa.array(offsets), values)
        path = os.path.join(directory, "part-%d.parquet" % index)
        pq.write_table(pa.table(columns), path, row_group_size=65536)
        paths.append(path)
    return paths


def consume(ds: tf.data.Dataset) -> int:
    rows = 0
    for batch in ds:
        # Every tensor of the batch (a list column's DataFrame.Value or
        # RaggedTensor holds several).
        for value in tf.nest.flatten(batch, expand_composites=True):
            value.numpy()
        rows += int(batch["label"].shape[0])
    return rows


def pandas_dataset(paths: List[str], columns: List[str],
                   batch_size: int) -> tf.data.Dataset:
    import pandas as pd  # checked in main()

    frame = pd.concat([pq.read_table(p, columns=columns).to_pandas()
                       for p in paths], ignore_index=True)
    tensors = {name: frame[name].to_numpy() for name in columns
               if name != "tags"}
    if "tags" in columns:
        lists = frame["tags"].to_numpy()
        tensors["tags"] = tf.RaggedTensor.from_row_lengths(
            np.concatenate(lists).astype(np.int64),
            np.fromiter((len(x) for x in lists), np.int64, len(lists)))
    return tf.data.Dataset.from_tensor_slices(tensors).batch(batch_size)


def best_rate(make: Callable[[], tf.data.Dataset], repeats: int,
              expected_rows: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        rows = consume(make())
        best = min(best, time.perf_counter() - start)
        if rows != expected_rows:
            raise RuntimeError("read %d rows, expected %d" % (rows,
                                                              expected_rows))
    return expected_rows / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 40_000, 1
    try:
        import pandas  # noqa: F401  (the reference reader)
    except ImportError:
        sys.exit("parquet_input.py: the reference reader needs pandas "
                 "(pip install pandas)")
    tf.config.threading.set_inter_op_parallelism_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(tmp, args.rows, args.files)
        rows = args.rows // args.files * args.files
        table = []
        for label, columns in (("scalar columns", SCALARS),
                               ("with list column", SCALARS + ["tags"])):
            reference = best_rate(
                lambda: pandas_dataset(paths, columns, args.batch_size),
                args.repeats, rows)
            table.append((label, "pyarrow -> pandas -> from_tensor_slices",
                          reference, 1.0))
            for parallel in (None, 2):
                rate = best_rate(lambda: hb_data.ParquetDataset(
                    paths, args.batch_size, fields=columns,
                    num_parallel_reads=parallel), args.repeats, rows)
                name = "hb.data.ParquetDataset" + (
                    " (num_parallel_reads=2)" if parallel else "")
                table.append((label, name, rate, rate / reference))
    print("Parquet input: %d rows in %d files, batch %d, best of %d, "
          "tensorflow %s, %d CPUs" % (rows, args.files, args.batch_size,
                                      args.repeats, tf.__version__,
                                      os.cpu_count() or 0))
    print("| columns | reader | rows/s | vs pandas |")
    print("| --- | --- | ---: | ---: |")
    for label, name, rate, ratio in table:
        print("| %s | %s | %s | %.2fx |" % (label, name,
                                            format(int(rate), ","), ratio))


if __name__ == "__main__":
    main()
