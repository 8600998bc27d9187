"""One batch of hb.data.ParquetDataset: the rows of an Arrow table turned
into the numpy arrays that become its tensors (see
hbcore_tf.data._parquet_schema.Column for which tensor each column is).

- a scalar column: its values, [batch];
- a list column of list depth d: ``DataFrame.Value(values,
  nested_row_splits)``, the items of every row flattened and d int32
  row-splits vectors, each starting at 0 (a batch is a slice of the file,
  whose Arrow offsets do not);
- a list column of fixed shape S: its items reshaped to [batch] + S, in a
  Value with its row splits (ragged_rank 1) or alone (ragged_rank 0).
  Every row must hold prod(S) items; a row that does not is an error
  naming the column, the file, the row and both counts.
"""
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from hbcore_tf.data._parquet_schema import Column, pyarrow_modules
from hbcore_tf.data.dataframe import SPLITS_DTYPE, DataFrame

_MAX_SPLIT = np.iinfo(SPLITS_DTYPE.as_numpy_dtype).max


def decoded(pa: Any, array: Any) -> Any:
    """``array`` (an Array or ChunkedArray) with dictionary encoding undone
    (else unchanged). Chunks (row groups) may have different dictionaries,
    so each chunk is decoded before they are combined."""
    if not pa.types.is_dictionary(array.type):
        return array
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([c.dictionary_decode() for c in array.chunks],
                                type=array.type.value_type)
    return array.dictionary_decode()


def _file_row(pieces: Sequence[Tuple[int, int]], index: int) -> int:
    """The file row of the batch's row ``index``; ``pieces`` are the
    batch's runs of consecutive file rows, (first row, count), in order."""
    for first, count in pieces:
        if index < count:
            return first + index
        index -= count
    return -1


def _splits(pa: Any, array: Any, column: Column, path: str
            ) -> Tuple[Any, List[np.ndarray]]:
    """The innermost items of a (nested) list array and its row splits,
    outermost level first, each starting at 0.

    Raises:
      ValueError: null list items, or more items than int32 splits hold.
    """
    splits = []
    for _ in range(column.depth):
        offsets = array.offsets.to_numpy().astype(np.int64)
        if offsets[-1] - offsets[0] > _MAX_SPLIT:
            raise ValueError(
                "column %r of %s: one batch holds %d list items, more than "
                "int32 row splits can index; use a smaller batch_size" % (
                    column.name, path, offsets[-1] - offsets[0]))
        splits.append((offsets - offsets[0]).astype(
            SPLITS_DTYPE.as_numpy_dtype))
        # flatten() takes the child items of this slice of the array only.
        array = decoded(pa, array.flatten())
        if array.null_count:
            raise ValueError("column %r of %s has null list items" % (
                column.name, path))
    return array, splits


def _fixed(values: np.ndarray, splits: np.ndarray, column: Column,
           path: str, pieces: Sequence[Tuple[int, int]]) -> np.ndarray:
    """The items of a fixed-shape list column as [batch] + shape.

    Raises:
      ValueError: a row does not hold prod(shape) items.
    """
    width = int(np.prod(column.shape))
    lengths = np.diff(splits)
    bad = np.flatnonzero(lengths != width)
    if bad.size:
        raise ValueError(
            "column %r of %s: row %d holds %d items, but its "
            "DataFrame.Field gives shape=%s (%d items in every row); %d of "
            "the batch's %d rows differ" % (
                column.name, path, _file_row(pieces, int(bad[0])),
                lengths[bad[0]], column.shape, width, bad.size, lengths.size))
    return values.reshape([lengths.size] + column.shape)


def to_arrays(table: Any, columns: List[Column], path: str,
              pieces: Sequence[Tuple[int, int]]) -> Dict[str, Any]:
    """One batch (an Arrow table) as numpy arrays and DataFrame.Values.

    Args:
      table: the batch's rows.
      columns: the columns to convert (all in ``table``).
      path: the file (named in errors).
      pieces: the batch's runs of file rows, (first row, count) (named in
        errors).

    Returns:
      A dict from column name to its numpy array or DataFrame.Value.

    Raises:
      ValueError: null values, or a row of a fixed-shape column with
        another number of items.
    """
    pa, _ = pyarrow_modules()
    out: Dict[str, Any] = {}
    for column in columns:
        array = decoded(pa, table.column(column.name)).combine_chunks()
        if array.null_count:
            raise ValueError("column %r of %s has null values; "
                             "ParquetDataset needs every row filled" % (
                                 column.name, path))
        splits: List[np.ndarray] = []
        if column.depth:
            array, splits = _splits(pa, array, column, path)
        values = array.to_numpy(zero_copy_only=False)
        if column.dtype != tf.string:
            values = values.astype(column.dtype.as_numpy_dtype, copy=False)
        if column.shape:
            values = _fixed(values, splits[0], column, path, pieces)
        out[column.name] = DataFrame.Value(
            values, splits[:column.ragged_rank]) if column.ragged_rank \
            else values
    return out
