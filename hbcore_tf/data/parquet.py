"""``hb.data.ParquetDataset``: batches of Parquet columns as a tf.data.Dataset.

    ds = hb.data.ParquetDataset(files, batch_size=1024,
                                partition_count=hb.context.world_size,
                                partition_index=hb.context.rank)
    ds = ds.prefetch(tf.data.AUTOTUNE)   # elements: {column name: tensor}

Reading: pyarrow reads one row group at a time (only the selected columns)
and the rows are cut into batches of ``batch_size``; batches do not span
files, so each file's last batch may be short (dropped with
``drop_remainder=True``). As in HybridBackend, scalar columns become dense
[batch] tensors and list columns (lists of lists too)
``hb.data.DataFrame.Value(values, nested_row_splits)`` with int32 row
splits (``ds.apply(hb.data.to_sparse())`` or ``DataFrame.Field(...,
sparse=True)``: tf.SparseTensor); a list column of fixed length read with
``DataFrame.Field(name, shape=[n])`` is a Value whose values are dense
[batch, n] (``ragged_rank=0``: the dense tensor alone). String columns
become tf.string, dictionary-encoded columns (pandas categoricals) their
decoded values. Every file must hold each selected column as the first
file does (list depth, strings or numbers, one numeric dtype unless a
Field names the dtype to cast to); a difference is a ValueError naming the
column and both files when the dataset is built, not a failure in the
middle of training. A row of a fixed-shape column with another number of
items fails the batch that reads it (naming the column, file and row).

Corrupted data (HybridBackend's ``skip_corrupted_data``, default False): a
row group that pyarrow cannot read (its pages do not decode: bytes
overwritten, a broken page header) is a ValueError naming the file and the
row group when the batch that needs it is read; with
``skip_corrupted_data=True`` its rows are skipped instead (an error is
logged to the "hbcore_tf.data" logger) and reading goes on with the next
row group. As in HybridBackend, only data that fails while being read is
skipped: a file whose footer cannot be read (truncated, not Parquet,
missing) is still an error, and so are schema mismatches and null values.
Corruption that still decodes (no page checksums) cannot be detected.

Partitioning (``partition_count`` readers, this one ``partition_index``):
every row is read by exactly one partition. With at least as many files as
partitions, partition k reads files k, k + count, k + 2 count, ... whole;
with fewer files, every file is split: by row groups (contiguous runs of
whole row groups) when it has at least ``partition_count`` of them, else by
rows.

pyarrow is an optional dependency (``pip install "hbcore[parquet]"``); it
is imported when a ParquetDataset is built, not when hbcore_tf.data is.
"""
import logging
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from hbcore_tf.data._parquet_batch import to_arrays
from hbcore_tf.data._parquet_schema import (Column, check_columns,
                                            pyarrow_modules, resolve_columns,
                                            typed_columns)
from hbcore_tf.data.dataframe import DataFrame, as_dict

_LOG = logging.getLogger("hbcore_tf.data")

def _split_file(row_groups: Sequence[int], count: int) -> List[Tuple[int, int]]:
    """Row ranges [start, end) of one file for ``count`` partitions:
    contiguous runs of whole row groups when there are enough of them,
    else an even split of the rows."""
    total = int(sum(row_groups))
    if len(row_groups) >= count:
        bounds = np.concatenate([[0], np.cumsum(row_groups)]).astype(int)
        cuts = np.array_split(np.arange(len(row_groups)), count)
        return [(int(bounds[c[0]]), int(bounds[c[-1] + 1])) for c in cuts]
    edges = [total * k // count for k in range(count + 1)]
    return [(edges[k], edges[k + 1]) for k in range(count)]


def _plan(paths: List[str], row_groups: List[List[int]], count: int,
          index: int) -> List[Tuple[str, int, int]]:
    """The (file, start row, end row) pieces partition ``index`` reads."""
    if len(paths) >= count:
        return [(p, 0, int(sum(g))) for i, (p, g) in
                enumerate(zip(paths, row_groups)) if i % count == index]
    pieces = []
    for path, groups in zip(paths, row_groups):
        start, end = _split_file(groups, count)[index]
        if end > start:
            pieces.append((path, start, end))
    return pieces


def _read_group(reader: Any, group: int, names: List[str], path: str,
                use_threads: bool, skip_corrupted_data: bool) -> Any:
    """Row group ``group`` of ``path`` (the ``names`` columns), or None when
    it cannot be read and ``skip_corrupted_data`` is set (logged).

    Raises:
      ValueError: it cannot be read (its pages do not decode) and
        ``skip_corrupted_data`` is not set; names the file and row group.
    """
    pa, _ = pyarrow_modules()
    try:
        return reader.read_row_group(group, columns=names,
                                     use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        rows = reader.metadata.row_group(group).num_rows
        if not skip_corrupted_data:
            raise ValueError(
                "ParquetDataset: cannot read row group %d (%d rows) of %s, "
                "the data is corrupted: %s (skip_corrupted_data=True skips "
                "such row groups)" % (group, rows, path, exc)) from exc
        _LOG.error("ParquetDataset: skipping corrupted data: row group %d "
                   "(%d rows) of %s: %s", group, rows, path, exc)
        return None


def _read_rows(path: str, start: int, end: int, columns: List[Column],
               batch_size: int, drop_remainder: bool,
               use_threads: bool = True,
               skip_corrupted_data: bool = False
               ) -> Iterator[Dict[str, Any]]:
    """Yields the batches of rows [start, end) of one file (end < 0: all).

    Rows of a row group that cannot be read are skipped with
    ``skip_corrupted_data`` (the batches are cut from the rows that remain).

    Raises:
      FileNotFoundError, ValueError, TypeError: as _open_file and
        _check_columns (the file does not hold ``columns``), null values,
        or (without ``skip_corrupted_data``) a row group that cannot be
        read.
    """
    pa, _ = pyarrow_modules()
    reader = _open_file(path)
    # Files named by a dataset are only seen here; files of a list were
    # checked against the first one when the dataset was built.
    check_columns(columns, reader.schema_arrow, path, None)
    names = [c.name for c in columns]
    if end < 0:
        end = reader.metadata.num_rows
    # The rows not yet yielded: (table, its first row in the file) pieces,
    # consecutive in the file unless a corrupted row group lies between.
    pending: List[Tuple[Any, int]] = []
    pending_rows, first = 0, 0
    for group in range(reader.metadata.num_row_groups):
        rows = reader.metadata.row_group(group).num_rows
        lo, hi = max(start, first), min(end, first + rows)
        table = None
        if lo < hi:
            table = _read_group(reader, group, names, path, use_threads,
                                skip_corrupted_data)
        if table is not None:
            pending.append((table.slice(lo - first, hi - lo), lo))
            pending_rows += hi - lo
            while pending_rows >= batch_size:
                yield _batch(pa, pending, batch_size, columns, path)
                pending = _after(pending, batch_size)
                pending_rows -= batch_size
        first += rows
        if first >= end:
            break
    if pending_rows and not drop_remainder:
        yield _batch(pa, pending, pending_rows, columns, path)


def _batch(pa: Any, pending: List[Tuple[Any, int]], rows: int,
           columns: List[Column], path: str) -> Dict[str, Any]:
    """The first ``rows`` pending rows as one batch (see to_arrays)."""
    pieces, left = [], rows
    for table, first in pending:
        if left <= 0:
            break
        pieces.append((first, min(left, table.num_rows)))
        left -= table.num_rows
    merged = pa.concat_tables([t for t, _ in pending[:len(pieces)]])
    return to_arrays(merged.slice(0, rows), columns, path, pieces)


def _after(pending: List[Tuple[Any, int]], rows: int
           ) -> List[Tuple[Any, int]]:
    """The pending pieces less their first ``rows`` rows."""
    out = []
    for table, first in pending:
        if rows >= table.num_rows:
            rows -= table.num_rows
            continue
        out.append((table.slice(rows), first + rows))
        rows = 0
    return out


def _sparse_fields(columns: List[Column]) -> Any:
    names = {c.name for c in columns if c.sparse}

    def convert(batch: Dict[str, Any]) -> Dict[str, Any]:
        return {k: DataFrame.to_sparse(v) if k in names else v
                for k, v in batch.items()}

    return convert if names else None


def _check_batching(batch_size: Any, count: Any, index: Any) -> None:
    for name, value in (("batch_size", batch_size),
                        ("partition_count", count)):
        if not _is_int(value) or value < 1:
            raise ValueError("ParquetDataset: %s must be a positive integer, "
                             "got %r" % (name, value))
    if not _is_int(index) or not 0 <= index < count:
        raise ValueError("ParquetDataset: partition_index must be in [0, %d) "
                         "(partition_count), got %r" % (count, index))


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_parallelism(num_parallel_reads: Any, num_sequential_reads: Any,
                       num_parallel_parser_calls: Any) -> None:
    """Raises ValueError naming a bad parallelism argument: each is a
    positive integer, and the first and last may also be None or
    tf.data.AUTOTUNE."""
    for name, value, optional in (
            ("num_parallel_reads", num_parallel_reads, True),
            ("num_sequential_reads", num_sequential_reads, False),
            ("num_parallel_parser_calls", num_parallel_parser_calls, True)):
        if optional and (value is None or
                         (_is_int(value) and value == tf.data.AUTOTUNE)):
            continue
        if not _is_int(value) or value < 1:
            raise ValueError(
                "ParquetDataset: %s must be a positive integer%s, got %r" % (
                    name, ", None or tf.data.AUTOTUNE" if optional else "",
                    value))


class ParquetDataset(tf.data.Dataset):
    """A tf.data.Dataset of dicts {column: batch tensor} read from Parquet.

    Args:
      filenames: a path, a list or tuple of paths, a 0-D or 1-D tf.string
        tensor, or a tf.data.Dataset of paths. A tensor whose value is not
        known when the dataset is built (a placeholder, a tf.function
        argument) is read like a dataset of its paths. With a dataset (or
        such a tensor) ``fields`` must give every column as a
        DataFrame.Field with dtype and ragged_rank, and partitioning is by
        files.
      batch_size: rows per batch (the last batch of a file may be short).
      fields: the columns to read: a name, a hb.data.DataFrame.Field, or a
        list of them; None: every column of the first file. Every file must
        hold every column as the first one does (list or scalar, strings
        or numbers, and the same dtype unless a Field gives the dtype to
        cast to).
      partition_count: how many readers share the files (e.g. world size).
      partition_index: which of them this one is (e.g. rank).
      skip_corrupted_data: skip the rows of row groups that cannot be read
        (logged) instead of failing; see the module docstring for what
        counts (HybridBackend's argument and default).
      drop_remainder: drop each file's last batch when it is short.
      num_parallel_reads: files (pieces) read at the same time; None: one;
        tf.data.AUTOTUNE: as many as tf.data finds best.
      num_sequential_reads: consecutive batches taken from one file before
        moving to the next when reading in parallel.
      num_parallel_parser_calls: HybridBackend's column-parsing
        parallelism: 1 decodes the columns of a row group one after the
        other; None, tf.data.AUTOTUNE or more than 1 lets pyarrow decode
        them in parallel on its thread pool.

    Raises:
      ImportError: pyarrow is not installed (names the extra to install).
      FileNotFoundError: a file does not exist (names it).
      ValueError: a missing column (names it and the file), columns that
        differ between files or from their Field (names the column and the
        files), a file that is not Parquet (names it), null values, bad
        batching, partition or parallelism arguments; when iterated (as
        tf.errors.InvalidArgumentError): a row group that cannot be read
        without skip_corrupted_data (names the file and row group).
      TypeError: a column type with no tensor equivalent (names it),
        filenames that are not strings, or skip_corrupted_data that is not
        a bool.
    """

    def __init__(self, filenames: Any, batch_size: int = 1, fields: Any = None,
                 partition_count: int = 1, partition_index: int = 0,
                 skip_corrupted_data: bool = False,
                 drop_remainder: bool = False,
                 num_parallel_reads: Optional[int] = None,
                 num_sequential_reads: int = 1,
                 num_parallel_parser_calls: Optional[int] = None) -> None:
        _check_batching(batch_size, partition_count, partition_index)
        _check_parallelism(num_parallel_reads, num_sequential_reads,
                           num_parallel_parser_calls)
        if not isinstance(skip_corrupted_data, (bool, np.bool_)):
            raise TypeError("ParquetDataset: skip_corrupted_data must be a "
                            "bool, got %r" % (skip_corrupted_data,))
        skip_corrupted_data = bool(skip_corrupted_data)
        pyarrow_modules()
        if tf.is_tensor(filenames):
            filenames = _tensor_filenames(filenames)
        if isinstance(filenames, tf.data.Dataset):
            _check_filenames_dataset(filenames)
            columns = typed_columns(fields)
            pieces = filenames.shard(partition_count, partition_index).map(
                lambda p: (p, tf.constant(0, tf.int64),
                           tf.constant(-1, tf.int64)))
        else:
            paths = _paths(filenames)
            metas = [_metadata(p) for p in paths]
            columns = resolve_columns(metas[0].schema.to_arrow_schema(),
                                       fields, paths[0])
            # Every file must hold the columns as the first one does, or a
            # batch of a later file would not match the dataset's spec.
            for path, meta in zip(paths[1:], metas[1:]):
                check_columns(columns, meta.schema.to_arrow_schema(), path,
                               paths[0])
            groups = [[meta.row_group(i).num_rows
                       for i in range(meta.num_row_groups)] for meta in metas]
            plan = _plan(paths, groups, int(partition_count),
                         int(partition_index))
            pieces = tf.data.Dataset.from_tensor_slices((
                tf.constant([p for p, _, _ in plan], tf.string),
                tf.constant([s for _, s, _ in plan], tf.int64),
                tf.constant([e for _, _, e in plan], tf.int64)))
        self._columns = columns
        signature = {c.name: c.spec() for c in columns}
        use_threads = num_parallel_parser_calls != 1

        def read(path: Any, start: Any, end: Any) -> Iterator[Dict[str, Any]]:
            return _read_rows(path.decode(), int(start), int(end), columns,
                              int(batch_size), bool(drop_remainder),
                              use_threads, skip_corrupted_data)

        def piece_dataset(path: tf.Tensor, start: tf.Tensor,
                          end: tf.Tensor) -> tf.data.Dataset:
            return tf.data.Dataset.from_generator(
                read, output_signature=signature, args=(path, start, end))

        if num_parallel_reads == tf.data.AUTOTUNE:
            dataset = pieces.interleave(
                piece_dataset, cycle_length=tf.data.AUTOTUNE,
                block_length=int(num_sequential_reads),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        elif num_parallel_reads is not None and num_parallel_reads > 1:
            parallel = int(num_parallel_reads)
            dataset = pieces.interleave(
                piece_dataset, cycle_length=parallel,
                block_length=int(num_sequential_reads),
                num_parallel_calls=parallel, deterministic=True)
        else:
            dataset = pieces.flat_map(piece_dataset)
        convert = _sparse_fields(columns)
        if convert is not None:
            dataset = dataset.map(convert)
        self._dataset = dataset
        super().__init__(dataset._variant_tensor)  # pylint: disable=protected-access

    @classmethod
    def read_schema(cls, filename: str, fields: Any = None,
                    lower: bool = False) -> Tuple["DataFrame.Field", ...]:
        """HybridBackend's ``ParquetDataset.read_schema``: the typed Fields
        of a file's columns, to pass as ``fields=`` (e.g. when filenames
        come as a dataset, which needs typed Fields).

        Args:
          filename: a Parquet file.
          fields: column names and/or DataFrame.Field (None: every column
            of the file), as ``fields`` of ParquetDataset.
          lower: a column the file does not hold under its name is looked
            up under its name in lower case.

        Returns:
          A tuple of DataFrame.Field with name, dtype and ragged_rank (a
          Field's own dtype, to cast to, and ``sparse`` are kept).

        Raises:
          FileNotFoundError, ValueError, TypeError: as ParquetDataset (a
            missing column, a Field that disagrees with the file, a column
            type with no tensor equivalent, a file that is not Parquet).
        """
        path = _paths(filename)[0]
        schema = _metadata(path).schema.to_arrow_schema()
        wanted = list(as_dict(fields if fields is not None
                              else schema.names).values())
        if lower:
            wanted = [DataFrame.Field(
                f.name.lower(), f.dtype, ragged_rank=f.ragged_rank,
                shape=f.shape, sparse=f.sparse)
                if schema.get_field_index(f.name) < 0 else f for f in wanted]
        return tuple(c.field() for c in resolve_columns(schema, wanted, path))

    def _inputs(self) -> List[tf.data.Dataset]:
        return []

    @property
    def element_spec(self) -> Any:
        """The elements' structure: a dict of one spec per column."""
        return self._dataset.element_spec

    @property
    def fields(self) -> List[str]:
        """The names of the columns this dataset reads, in order."""
        return [c.name for c in self._columns]


def read_parquet(batch_size: int = 1, fields: Any = None,
                 partition_count: int = 1, partition_index: int = 0,
                 drop_remainder: bool = False,
                 num_parallel_reads: Optional[int] = None,
                 num_sequential_reads: int = 1,
                 num_parallel_parser_calls: Optional[int] = None,
                 skip_corrupted_data: bool = False) -> Any:
    """``filenames_dataset.apply(hb.data.read_parquet(...))``: as
    ParquetDataset(filenames_dataset, ...) (see there for the arguments).

    Args:
      batch_size: rows per batch (the last batch of a file may be short).
      fields: every column to read, as hb.data.DataFrame.Field with dtype
        and ragged_rank (required with a dataset of filenames).
      partition_count: how many readers share the files (split by files).
      partition_index: which of them this one is.
      drop_remainder: drop each file's last batch when it is short.
      num_parallel_reads: files read at the same time; None: one.
      num_sequential_reads: consecutive batches taken from one file before
        moving to the next when reading in parallel.
      num_parallel_parser_calls: see ParquetDataset.
      skip_corrupted_data: skip row groups that cannot be read (see
        ParquetDataset).

    Returns:
      A function from a tf.data.Dataset of file paths to the
      ParquetDataset; it raises as ParquetDataset does.
    """
    def apply(filenames: tf.data.Dataset) -> ParquetDataset:
        return ParquetDataset(filenames, batch_size, fields, partition_count,
                              partition_index, skip_corrupted_data,
                              drop_remainder, num_parallel_reads,
                              num_sequential_reads, num_parallel_parser_calls)
    return apply


def _tensor_filenames(filenames: Any) -> Any:
    """A tf.string tensor of filenames as a list of paths when its value is
    known now (eager, or a constant in a graph), else as a dataset of its
    paths (read like any dataset of filenames).

    Raises:
      TypeError: the tensor is not tf.string.
    """
    if filenames.dtype != tf.string:
        raise TypeError("ParquetDataset: filenames must be a tf.string "
                        "tensor, got %s" % filenames.dtype.name)
    value = tf.get_static_value(filenames)
    if value is not None:
        return [f.decode() if isinstance(f, bytes) else f
                for f in np.reshape(value, [-1]).tolist()]
    return tf.data.Dataset.from_tensor_slices(tf.reshape(filenames, [-1]))


def _check_filenames_dataset(filenames: tf.data.Dataset) -> None:
    """Raises TypeError unless the dataset's elements are scalar tf.string
    tensors (file paths)."""
    spec = filenames.element_spec
    if not isinstance(spec, tf.TensorSpec) or spec.dtype != tf.string or \
            not spec.shape.is_compatible_with([]):
        raise TypeError("ParquetDataset: a dataset of filenames must yield "
                        "scalar tf.string paths, got elements %s" % (spec,))


def _paths(filenames: Any) -> List[str]:
    if isinstance(filenames, (str, bytes)):
        filenames = [filenames]
    if isinstance(filenames, np.ndarray):
        filenames = filenames.reshape([-1]).tolist()
    paths = [f.decode() if isinstance(f, bytes) else f for f in filenames]
    if not paths:
        raise ValueError("ParquetDataset: no filenames given")
    for path in paths:
        if not isinstance(path, str):
            raise TypeError("ParquetDataset: filenames must be strings, got "
                            "%r" % (path,))
    return paths


def _open_file(path: str) -> Any:
    """pq.ParquetFile(path), with errors that name the file.

    Raises:
      FileNotFoundError: no such file.
      ValueError: the file is not a readable Parquet file (a directory,
        empty, corrupted, another format).
    """
    pa, pq = pyarrow_modules()
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError as exc:
        raise FileNotFoundError("ParquetDataset: no such file: %s" % path) \
            from exc
    except (OSError, pa.ArrowException) as exc:
        # ArrowInvalid (not Parquet, empty file) is a ValueError, other
        # Arrow errors OSErrors; neither names the file.
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError("ParquetDataset: no such file: %s" % path) \
                from exc
        raise ValueError("ParquetDataset: %s is not a readable Parquet file: "
                         "%s" % (path, exc)) from exc


def _metadata(path: str) -> Any:
    return _open_file(path).metadata


__all__ = ["DataFrame", "ParquetDataset", "read_parquet"]
