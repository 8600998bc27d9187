"""``hb.data.rebatch``: HybridBackend's batch resizing of DataFrame values.

    ds = hb.data.ParquetDataset(files, batch_size=1024)
    ds = ds.apply(hb.data.rebatch(4096))   # batches now span files

ParquetDataset's batches never span files, so each file's last batch is
short; ``rebatch`` regroups the rows of consecutive batches into batches of
exactly ``batch_size`` rows (the last one shorter, or dropped with
``drop_remainder=True``). Dense, ragged and sparse components are
supported; row order is kept.
"""
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from hbcore_tf.data.dataframe import as_dict


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
        return ds.unbatch().batch(size, drop_remainder=drop_remainder)

    return apply


__all__ = ["rebatch"]
