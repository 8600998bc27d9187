"""Tabular input as tensors: ``hb.data.DataFrame`` (its ``Field`` and
``Value``) and the ``to_sparse`` / ``unbatch_and_to_sparse`` conversions,
with HybridBackend's names and semantics.

A Field names one column and, optionally, fixes how it becomes a tensor:

    Field("user_id", tf.int64)                    # scalar: Tensor [batch]
    Field("clicks", tf.int64, ragged_rank=1)      # list: DataFrame.Value
    Field("paths", tf.int64, ragged_rank=2)       # list of lists: Value
    Field("emb", tf.float32, shape=[4])           # list of 4: Value whose
                                                  # values are [batch, 4]
    Field("emb", tf.float32, ragged_rank=0, shape=[4])  # Tensor [batch, 4]
    Field("tags", tf.string, ragged_rank=1, sparse=True)  # SparseTensor

A batch of a list column is a ``DataFrame.Value(values, nested_row_splits)``
(HybridBackend's namedtuple): ``values`` holds the items of every row,
flattened ([items] or, with a fixed ``shape``, [batch] + shape), and
``nested_row_splits`` one int32 vector per list level, outermost first:
the items of row i at the innermost level are
``values[splits[i]:splits[i + 1]]``, as in ``tf.RaggedTensor``
(``tf.RaggedTensor.from_nested_row_splits(v.values, v.nested_row_splits)``
is the same batch as a ragged tensor). ``Value.to_sparse()`` (or
``DataFrame.to_sparse(batch)``, ``ds.apply(hb.data.to_sparse())``) turns
it into a tf.SparseTensor [batch, longest list, ...]; a fixed-length list
becomes its dense values.
"""
import collections
from typing import Any, Callable, Dict, Optional

import numpy as np
import tensorflow as tf

_SUPPORTED = (tf.bool, tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
              tf.uint16, tf.uint32, tf.uint64, tf.float16, tf.float32,
              tf.float64, tf.string)

# The dtype of every row-splits vector of a DataFrame.Value (HybridBackend's).
SPLITS_DTYPE = tf.int32


def _fixed_shape(name: str, shape: Any) -> tf.TensorShape:
    """A Field's shape: [] for none (None, [] and HybridBackend-era [None]
    say the same), else fully known positive dimensions.

    Raises:
      ValueError: an unknown or non-positive dimension.
    """
    if shape is None:
        return tf.TensorShape([])
    shape = tf.TensorShape(shape)
    if shape.rank is None:
        raise ValueError("DataFrame.Field %r: shape must have a known rank, "
                         "got %s" % (name, shape))
    dims = shape.as_list()
    if dims == [None]:
        return tf.TensorShape([])
    if any(d is None or d < 1 for d in dims):
        raise ValueError("DataFrame.Field %r has incomplete shape %s: the "
                         "shape of a fixed-length list column needs every "
                         "dimension known and positive" % (name, dims))
    return shape


class DataFrame:
    """HybridBackend's DataFrame: ``Field`` (a column), ``Value`` (a batch
    of a list column), and the ``to_sparse`` conversions."""

    class Field:
        """One column of a Parquet file and the tensor it becomes.

        Args:
          name: the column's name in the file.
          dtype: the tensor dtype (None: from the file's schema). Values are
            cast to it when the file's type differs.
          ragged_rank: how many list levels the column has: 0 for a scalar
            column, 1 for a list column, 2 for a list of lists, ... (None:
            from the file's schema). With ``shape``: 1 (or None) reads a
            DataFrame.Value whose values are dense, 0 a plain dense tensor.
          shape: the shape of every row of a list column of fixed length
            (e.g. [4]: each row holds 4 items, read as [batch, 4]; [2, 3]:
            6 items read as [batch, 2, 3]). None or []: no fixed shape.
          sparse: a list column becomes a tf.SparseTensor (as after
            ``DataFrame.to_sparse``) instead of a DataFrame.Value.

        Raises:
          TypeError: ``dtype`` is not a supported tensor dtype.
          ValueError: a bad ``name``, ``ragged_rank`` or ``shape``, or a
            ``shape`` with ``ragged_rank`` > 1 or ``sparse``.
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
            if ragged_rank is not None and (
                    isinstance(ragged_rank, bool) or
                    not isinstance(ragged_rank, (int, np.integer)) or
                    ragged_rank < 0):
                raise ValueError("DataFrame.Field %r: ragged_rank must be a "
                                 "non-negative integer (0: scalar column, 1: "
                                 "list column, 2: list of lists, ...), got %r"
                                 % (name, ragged_rank))
            self.ragged_rank = None if ragged_rank is None else int(ragged_rank)
            self.shape = _fixed_shape(name, shape)
            self.sparse = bool(sparse)
            if self.shape.rank and (self.ragged_rank or 0) > 1:
                raise ValueError("DataFrame.Field %r is a nested list "
                                 "(ragged_rank=%d) with shape %s; a fixed "
                                 "shape applies to list columns "
                                 "(ragged_rank=1) only" % (
                                     name, self.ragged_rank,
                                     self.shape.as_list()))
            if self.shape.rank and self.sparse:
                raise ValueError("DataFrame.Field %r: sparse=True and shape=%s "
                                 "cannot be combined (a fixed-length list is "
                                 "read dense)" % (name, self.shape.as_list()))

        @property
        def incomplete(self) -> bool:
            """Whether dtype or ragged_rank is still to come from a file."""
            return self.dtype is None or self.ragged_rank is None

        def __repr__(self) -> str:
            shape = ", shape=%s" % self.shape.as_list() if self.shape.rank \
                else ""
            return "DataFrame.Field(%r, dtype=%s, ragged_rank=%r%s%s)" % (
                self.name, None if self.dtype is None else self.dtype.name,
                self.ragged_rank, shape, ", sparse=True" if self.sparse else "")

    class Value(collections.namedtuple("DataFrameValue",
                                       ["values", "nested_row_splits"])):
        """A batch of a list column: ``values`` and one row-splits vector
        per list level (see the module docstring). A namedtuple, so it
        travels through tf.data and ``tf.nest`` as its two fields, and a
        session run returns it with numpy arrays in them."""

        __slots__ = ()

        def __new__(cls, values: Any, nested_row_splits: Any = None
                    ) -> "DataFrame.Value":
            splits = () if nested_row_splits is None else \
                tuple(nested_row_splits)
            return super().__new__(cls, values, splits)

        def __repr__(self) -> str:
            return "DataFrame.Value(%s, nested_row_splits=%s)" % (
                self.values, self.nested_row_splits)

        @property
        def fixed_length(self) -> bool:
            """A list column of fixed shape: ``values`` is [batch] + shape."""
            return len(self.nested_row_splits) == 1 and \
                (tf.TensorShape(self.values.shape).rank or 0) > 1

        def to_ragged(self) -> tf.RaggedTensor:
            """The batch as a tf.RaggedTensor [batch, (items), ...] (a
            fixed-length list: [batch, items, ...] with uniform rows).

            Returns:
              A tf.RaggedTensor with int32 row splits.
            """
            if self.fixed_length:
                return tf.RaggedTensor.from_tensor(self.values,
                                                   row_splits_dtype=SPLITS_DTYPE)
            return tf.RaggedTensor.from_nested_row_splits(
                self.values, self.nested_row_splits, validate=False)

        def to_sparse(self, name: Optional[str] = None) -> Any:
            """The batch as a tf.SparseTensor [batch, longest list, ...];
            a fixed-length list (or a Value without splits) is returned as
            its dense ``values``.

            Args:
              name: a name scope for the conversion.

            Returns:
              A tf.SparseTensor, or the dense values tensor.
            """
            if not self.nested_row_splits or self.fixed_length:
                return self.values
            with tf.name_scope(name or "DataFrameValueToSparse"):
                return self.to_ragged().to_sparse()

    @classmethod
    def to_sparse(cls, features: Any) -> Any:
        """Every list column of a batch as a tf.SparseTensor
        (``Value.to_sparse``; tf.RaggedTensor too); dense and sparse
        tensors unchanged. ``ds.map(hb.data.DataFrame.to_sparse)``.

        Args:
          features: a batch: a Value or tensor, or a dict / list / tuple
            of them (nested).

        Returns:
          The same structure with list columns converted.

        Raises:
          ValueError: a leaf is not a tensor or DataFrame.Value.
        """
        return map_columns(_column_to_sparse, features, "to_sparse")

    @classmethod
    def unbatch_and_to_sparse(cls, features: Any) -> Any:
        """A batch of one row (ParquetDataset's default batch_size=1) as
        that row: each list column becomes the row's tf.SparseTensor
        ([items], or [lists, longest, ...] for nested lists); dense
        columns (scalars, fixed-length lists) keep their batch dimension of
        one and sparse tensors are unchanged, as in HybridBackend.
        ``ds.map(hb.data.DataFrame.unbatch_and_to_sparse)``.

        Args:
          features: a batch (see ``to_sparse``).

        Returns:
          The same structure with list columns converted.

        Raises:
          ValueError: a leaf is not a tensor or DataFrame.Value.
          tf.errors.InvalidArgumentError: (when run) a list column holds
            more than one row (names it).
        """
        return map_columns(_column_unbatch_to_sparse, features,
                           "unbatch_and_to_sparse")


def map_columns(fn: Callable[[str, Any], Any], features: Any,
                caller: str = "DataFrame") -> Any:
    """Applies ``fn(path, column)`` to every column of a (nested) batch.

    DataFrame.Value is a column, not a tuple to descend into; dicts keep
    their keys (in order), lists and tuples (namedtuples too) their type.

    Args:
      fn: called with the column's path (for messages: its keys and
        indices joined by "/", e.g. "tags" or "0/tags") and the column.
      features: a column, or a dict / list / tuple of (nested) columns.
      caller: named in errors.

    Returns:
      The structure of ``fn``'s results.

    Raises:
      ValueError: a leaf is not a tensor or DataFrame.Value.
    """
    def walk(node: Any, path: str) -> Any:
        if isinstance(node, DataFrame.Value):
            return fn(path, node)
        if isinstance(node, dict):
            return type(node)((k, walk(v, _join(path, k)))
                              for k, v in node.items())
        if isinstance(node, (list, tuple)):
            items = [walk(v, _join(path, i)) for i, v in enumerate(node)]
            if hasattr(node, "_fields"):
                return type(node)(*items)
            return type(node)(items)
        if isinstance(node, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
            return fn(path, node)
        raise ValueError("hb.data.DataFrame.%s: column %r is a %s; columns "
                         "are tf.Tensor, tf.SparseTensor, tf.RaggedTensor or "
                         "hb.data.DataFrame.Value" % (
                             caller, path or "<batch>", type(node).__name__))

    return walk(features, "")


def _join(path: str, key: Any) -> str:
    return "%s/%s" % (path, key) if path else str(key)


def _column_to_sparse(path: str, column: Any) -> Any:
    del path
    if isinstance(column, (DataFrame.Value, tf.RaggedTensor)):
        return column.to_sparse()
    return column


def _column_unbatch_to_sparse(path: str, column: Any) -> Any:
    if isinstance(column, DataFrame.Value):
        if not column.nested_row_splits or column.fixed_length:
            return column.values
        column = column.to_ragged()
    if not isinstance(column, tf.RaggedTensor):
        return column
    check = tf.debugging.assert_equal(
        column.nrows(out_type=tf.int64), tf.constant(1, tf.int64),
        message="hb.data.DataFrame.unbatch_and_to_sparse: column %s holds "
                "more than one row; it unbatches batches of one row "
                "(ParquetDataset's default batch_size=1)" % (path or "<batch>"))
    with tf.control_dependencies([check]):
        row = column[0]
    if isinstance(row, tf.RaggedTensor):
        return row.to_sparse()
    items = tf.shape(row, out_type=tf.int64)[:1]
    return tf.SparseTensor(tf.reshape(tf.range(items[0]), [-1, 1]), row, items)


_TRANSFORMATION = object()


def _map_or_transformation(fn: Callable[[Any], Any], features: Any,
                           num_parallel_calls: Optional[int]) -> Any:
    """``fn(features)`` for a batch; for none (or a Python int, HybridBackend's
    positional ``num_parallel_calls``) the transformation
    ``dataset -> dataset.map(fn)``."""
    if features is _TRANSFORMATION or (
            isinstance(features, int) and not isinstance(features, bool)):
        if features is not _TRANSFORMATION:
            num_parallel_calls = features

        def apply(dataset: Any) -> Any:
            return dataset.map(fn, num_parallel_calls=num_parallel_calls)

        return apply
    return fn(features)


def to_sparse(features: Any = _TRANSFORMATION,
              num_parallel_calls: Optional[int] = None) -> Any:
    """``DataFrame.to_sparse`` as a dataset transformation (HybridBackend's
    ``ds.apply(hb.data.to_sparse())``, ``to_sparse(num_parallel_calls=n)``)
    or as a map function (``ds.map(hb.data.to_sparse)``).

    Args:
      features: a batch (the map form), or omitted / a Python int (the
        transformation form; the int is ``num_parallel_calls``).
      num_parallel_calls: the transformation's ``map`` parallelism.

    Returns:
      With a batch, ``DataFrame.to_sparse(features)``; without, a function
      ``dataset -> dataset``.

    Raises:
      ValueError: as ``DataFrame.to_sparse``.
    """
    return _map_or_transformation(DataFrame.to_sparse, features,
                                  num_parallel_calls)


def unbatch_and_to_sparse(features: Any = _TRANSFORMATION,
                          num_parallel_calls: Optional[int] = None) -> Any:
    """``DataFrame.unbatch_and_to_sparse`` as a dataset transformation
    (HybridBackend's ``ds.apply(hb.data.unbatch_and_to_sparse())``) or as a
    map function.

    Args:
      features: a batch of one row (the map form), or omitted / a Python
        int (the transformation form; the int is ``num_parallel_calls``).
      num_parallel_calls: the transformation's ``map`` parallelism.

    Returns:
      With a batch, ``DataFrame.unbatch_and_to_sparse(features)``; without,
      a function ``dataset -> dataset``.

    Raises:
      ValueError: as ``DataFrame.unbatch_and_to_sparse``.
    """
    return _map_or_transformation(DataFrame.unbatch_and_to_sparse, features,
                                  num_parallel_calls)


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
