"""``hb.data.rebatch``: HybridBackend's batch resizing of DataFrame values.

    ds = hb.data.ParquetDataset(files, batch_size=1024)
    ds = ds.apply(hb.data.rebatch(4096))   # batches now span files

ParquetDataset's batches never span files, so each file's last batch is
short; ``rebatch`` regroups the rows of consecutive batches into batches of
exactly ``batch_size`` rows (the last one shorter, or dropped with
``drop_remainder=True``). Dense, ragged and sparse components and
DataFrame.Values (list columns, fixed-length ones too) are supported; row
order is kept.

A DataFrame.Value travels through tf.data's unbatch and batch as the
tf.RaggedTensor of its rows (a fixed-length list as its dense values) and
is rebuilt afterwards from the output spec, so its element spec is the
same before and after.
"""
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf.data.dataframe import SPLITS_DTYPE, DataFrame, as_dict, \
    map_columns


def _as_rows(batch: Any) -> Any:
    """``batch`` with every DataFrame.Value as a tensor of rows."""
    def rows(path: str, column: Any) -> Any:
        del path
        if not isinstance(column, DataFrame.Value):
            return column
        return column.values if column.fixed_length else column.to_ragged()
    return map_columns(rows, batch, "rebatch")


def _as_values(batch: Any, spec: Any) -> Any:
    """The inverse of _as_rows, guided by the input's element ``spec``."""
    if isinstance(spec, DataFrame.Value):
        if spec.fixed_length:
            # Every row holds the same number of items.
            width = int(np.prod(spec.values.shape[1:]))
            rows = tf.shape(batch, out_type=SPLITS_DTYPE)[0]
            return DataFrame.Value(batch, [tf.range(rows + 1) * width])
        return DataFrame.Value(batch.flat_values, [
            tf.cast(s, SPLITS_DTYPE) for s in batch.nested_row_splits])
    if isinstance(spec, dict):
        return type(batch)((k, _as_values(batch[k], spec[k])) for k in batch)
    if isinstance(spec, (list, tuple)):
        items = [_as_values(b, s) for b, s in zip(batch, spec)]
        return type(spec)(*items) if hasattr(spec, "_fields") else \
            type(spec)(items)
    return batch


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise ValueError("rebatch: %s must be a positive integer, got %r" % (
            name, value))
    return int(value)


def rebatch(batch_size: int, min_batch_size: Optional[int] = None,
            fields: Any = None, drop_remainder: bool = False,
            num_parallel_scans: int = 1
            ) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """``ds.apply(hb.data.rebatch(batch_size, ...))``: regroups the rows of
    a batched dataset into batches of ``batch_size`` rows.

    Args:
      batch_size: rows per output batch.
      min_batch_size: HybridBackend's lower bound on the rows of a non-final
        batch (at most ``batch_size``); every non-final batch here holds
        exactly ``batch_size`` rows, which satisfies any such bound.
      fields: HybridBackend's column list (names or DataFrame.Field); when
        given, every element must be a dict holding exactly these columns.
      drop_remainder: drop the last batch when it is short.
      num_parallel_scans: accepted for HybridBackend compatibility (a
        positive integer); the rows are regrouped by tf.data.

    Returns:
      A function from a batched tf.data.Dataset (every component with a
      leading batch dimension) to the rebatched dataset.

    Raises:
      ValueError: a bad argument (names it); (when applied) ``fields``
        disagrees with the dataset's columns.
      TypeError: (when applied) the argument is not a tf.data.Dataset.
    """
    size = _positive("batch_size", batch_size)
    if min_batch_size is not None and \
            _positive("min_batch_size", min_batch_size) > size:
        raise ValueError("rebatch: min_batch_size (%r) must not exceed "
                         "batch_size (%r)" % (min_batch_size, batch_size))
    _positive("num_parallel_scans", num_parallel_scans)
    if not isinstance(drop_remainder, bool):
        raise ValueError("rebatch: drop_remainder must be True or False, got "
                         "%r" % (drop_remainder,))
    names = None if fields is None else list(as_dict(fields))

    def apply(ds: tf.data.Dataset) -> tf.data.Dataset:
        if not isinstance(ds, tf.data.Dataset):
            raise TypeError("rebatch: expected a tf.data.Dataset, got %s" %
                            type(ds).__name__)
        if names is not None:
            spec = ds.element_spec
            have = list(spec) if isinstance(spec, dict) else None
            if have is None or sorted(have) != sorted(names):
                raise ValueError("rebatch: fields %s do not match the "
                                 "dataset's columns %s" % (names, have))
        # unbatch splits every component (dense, ragged, sparse) into rows;
        # batch regroups them, ragged rows into a RaggedTensor and sparse
        # rows into a SparseTensor as wide as its widest row.
        spec = ds.element_spec
        rows = ds.map(_as_rows).unbatch()
        return rows.batch(size, drop_remainder=drop_remainder).map(
            lambda batch: _as_values(batch, spec))

    return apply


__all__ = ["rebatch"]


def RebatchDataset(input_dataset: tf.data.Dataset,  # noqa: N802 - HB's name
                   batch_size: int, min_batch_size: Optional[int] = None,
                   fields: Any = None, drop_remainder: bool = False,
                   num_parallel_scans: int = 1) -> tf.data.Dataset:
    """HybridBackend's class form of ``rebatch``:
    ``hb.data.RebatchDataset(ds, batch_size, ...)`` is
    ``ds.apply(hb.data.rebatch(batch_size, ...))``.

    A function returning the rebatched tf.data.Dataset, not a class of its
    own: ``isinstance(x, hb.data.RebatchDataset)`` is not available.

    Args:
      input_dataset: a batched dataset (e.g. a ParquetDataset).
      batch_size, min_batch_size, fields, drop_remainder,
        num_parallel_scans: as ``rebatch``.

    Returns:
      The rebatched dataset.

    Raises:
      ValueError: as ``rebatch``.
    """
    return input_dataset.apply(rebatch(
        batch_size, min_batch_size=min_batch_size, fields=fields,
        drop_remainder=drop_remainder,
        num_parallel_scans=num_parallel_scans))
