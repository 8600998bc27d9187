"""Column typing of tabular input: ``hb.data.DataFrame.Field`` and
``hb.data.to_sparse``.

A Field names one column and, optionally, fixes how it becomes a tensor:

    hb.data.DataFrame.Field("user_id", tf.int64)               # [batch]
    hb.data.DataFrame.Field("clicks", tf.int64, ragged_rank=1)  # list column
    hb.data.DataFrame.Field("tags", tf.string, ragged_rank=1, sparse=True)

Scalar columns are dense tensors of shape [batch]; list columns (ragged
rank 1) are tf.RaggedTensor of shape [batch, None], or tf.SparseTensor of
dense shape [batch, longest list in the batch] with ``sparse=True`` (or
after ``ds.map(hb.data.to_sparse)``, as in HybridBackend).
"""
from typing import Any, Dict, Optional

import tensorflow as tf

_SUPPORTED = (tf.bool, tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
              tf.uint16, tf.uint32, tf.uint64, tf.float16, tf.float32,
              tf.float64, tf.string)


class DataFrame:
    """Namespace of HybridBackend's DataFrame helpers (``Field``)."""

    class Field:
        """One column of a Parquet file and the tensor it becomes.

        Args:
          name: the column's name in the file.
          dtype: the tensor dtype (None: from the file's schema). Values are
            cast to it when the file's type differs.
          ragged_rank: 0 for a scalar column, 1 for a list column (None:
            from the file's schema).
          shape: accepted for HybridBackend compatibility; only None (or
            the batch-only shape) is supported.
          sparse: a list column becomes a tf.SparseTensor instead of a
            tf.RaggedTensor.

        Raises:
          TypeError: ``dtype`` is not a supported tensor dtype.
          ValueError: bad ``ragged_rank`` or ``shape``.
        """

        def __init__(self, name: str, dtype: Any = None,
                     ragged_rank: Optional[int] = None, shape: Any = None,
                     sparse: bool = False) -> None:
            if not isinstance(name, str) or not name:
                raise ValueError("DataFrame.Field: name must be a non-empty "
                                 "string, got %r" % (name,))
            self.name = name
            self.dtype = None if dtype is None else tf.as_dtype(dtype)
            if self.dtype is not None and self.dtype not in _SUPPORTED:
                raise TypeError("DataFrame.Field %r: dtype %s is not "
                                "supported" % (name, self.dtype.name))
            if ragged_rank not in (None, 0, 1):
                raise ValueError("DataFrame.Field %r: ragged_rank must be 0 "
                                 "(scalar column) or 1 (list column), got %r"
                                 % (name, ragged_rank))
            self.ragged_rank = ragged_rank
            if shape is not None and list(shape) not in ([], [None]):
                raise ValueError("DataFrame.Field %r: only scalar and list "
                                 "columns are supported, got shape %r"
                                 % (name, shape))
            self.shape = shape
            self.sparse = bool(sparse)

        def __repr__(self) -> str:
            return "DataFrame.Field(%r, dtype=%s, ragged_rank=%r%s)" % (
                self.name, None if self.dtype is None else self.dtype.name,
                self.ragged_rank, ", sparse=True" if self.sparse else "")


_TRANSFORMATION = object()


def to_sparse(features: Any = _TRANSFORMATION,
              num_parallel_calls: Optional[int] = None) -> Any:
    """Turns every tf.RaggedTensor in a (nested) batch into a tf.SparseTensor.

    Two forms: ``ds.map(hb.data.to_sparse)`` (a map function: called with a
    batch), and HybridBackend's ``ds.apply(hb.data.to_sparse())`` or
    ``ds.apply(hb.data.to_sparse(num_parallel_calls=n))`` (called without
    a batch: a dataset transformation that maps every batch so).

    Args:
      features: a batch of a ParquetDataset (usually a dict). Omitted, or
        a Python int (HybridBackend's positional ``num_parallel_calls``):
        the transformation form.
      num_parallel_calls: the transformation's ``map`` parallelism.

    Returns:
      With a batch, the same structure with ragged tensors converted;
      others unchanged. Without, a function ``dataset -> dataset``.
    """
    if features is _TRANSFORMATION or (
            isinstance(features, int) and not isinstance(features, bool)):
        if features is not _TRANSFORMATION:
            num_parallel_calls = features

        def apply(dataset: Any) -> Any:
            return dataset.map(to_sparse,
                               num_parallel_calls=num_parallel_calls)

        return apply
    return tf.nest.map_structure(
        lambda t: t.to_sparse() if isinstance(t, tf.RaggedTensor) else t,
        features, expand_composites=False)


def as_dict(fields: Any) -> Dict[str, "DataFrame.Field"]:
    """Normalises ``fields`` (names or Fields) to an ordered dict by name.

    Args:
      fields: an iterable of column names and hb.data.DataFrame.Field, or
        one name or Field on its own (a bare string is one column name,
        not a sequence of one-letter names).

    Returns:
      A dict from column name to DataFrame.Field, in the given order (a
      name becomes an untyped Field).

    Raises:
      TypeError: an entry is neither a string nor a DataFrame.Field.
      ValueError: a column is named twice, or a name is empty.
    """
    if isinstance(fields, (str, DataFrame.Field)):
        fields = [fields]
    out: Dict[str, DataFrame.Field] = {}
    for field in fields:
        if isinstance(field, str):
            field = DataFrame.Field(field)
        if not isinstance(field, DataFrame.Field):
            raise TypeError("fields must hold column names or "
                            "hb.data.DataFrame.Field, got %r" % (field,))
        if field.name in out:
            raise ValueError("fields names column %r twice" % field.name)
        out[field.name] = field
    return out
