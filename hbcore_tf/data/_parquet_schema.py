"""Column typing of hb.data.ParquetDataset: which tensor each selected
column becomes (``Column``), from a file's Arrow schema and the user's
DataFrame.Fields, and the checks that every file holds the columns so.

Also the one place that imports pyarrow (an optional extra), with errors
that say what to install.
"""
from typing import Any, List, Optional, Sequence, Tuple

import tensorflow as tf

from hbcore_tf.data.dataframe import SPLITS_DTYPE, DataFrame, as_dict

_INSTALL_HINT = ('hb.data.ParquetDataset needs pyarrow, an optional extra of '
                 'hbcore: pip install "hbcore[parquet]" (from a checkout: '
                 'pip install ".[parquet]")')


# pyarrow 26 and later refuse to import next to numpy 1.x (which
# TensorFlow 2.16 and 2.17 require) but do not declare it, so pip installs
# them together.
_NUMPY_HINT = ('pyarrow 26 and later need numpy 2, and TensorFlow 2.16 and '
               '2.17 need numpy 1: pip install "pyarrow<26"')


def pyarrow_modules() -> Tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "pyarrow":
            raise ImportError(_INSTALL_HINT) from exc
        # Installed but broken: say what pyarrow said.
        hint = _NUMPY_HINT if "NumPy" in str(exc) else _INSTALL_HINT
        raise ImportError("hb.data.ParquetDataset cannot import pyarrow: "
                          "%s (%s)" % (exc, hint)) from exc
    return pyarrow, pyarrow.parquet


class Column:
    """How one selected column is read and what tensor it becomes.

    ``depth`` is the file's list nesting (0: scalar, 1: list, 2: list of
    lists, ...); ``ragged_rank`` the row-splits vectors of the batch (the
    depth, or 0 for a fixed-length list read as a plain dense tensor);
    ``shape`` the fixed shape of every row of a list column ([]: none).
    """

    def __init__(self, name: str, dtype: tf.DType, depth: int,
                 sparse: bool, file_dtype: Optional[tf.DType] = None,
                 cast: bool = True, ragged_rank: Optional[int] = None,
                 shape: Sequence[int] = ()) -> None:
        self.name = name
        self.dtype = dtype            # the tensor's dtype
        self.depth = depth
        self.ragged_rank = depth if ragged_rank is None else ragged_rank
        self.shape = [int(d) for d in shape]
        self.sparse = sparse
        # The first file's dtype; cast: the user's Field fixed ``dtype``, so
        # files may hold any numeric dtype (False: all must hold file_dtype).
        self.file_dtype = file_dtype if file_dtype is not None else dtype
        self.cast = cast

    def spec(self) -> Any:
        values = tf.TensorSpec([None] + self.shape, self.dtype)
        if not self.ragged_rank:
            return values
        return DataFrame.Value(values, [tf.TensorSpec([None], SPLITS_DTYPE)
                                        for _ in range(self.ragged_rank)])

    def field(self) -> "DataFrame.Field":
        """The complete Field of this column (HybridBackend's read_schema)."""
        return DataFrame.Field(self.name, self.dtype,
                               ragged_rank=self.ragged_rank,
                               shape=self.shape or None, sparse=self.sparse)


def _tf_dtype(pa: Any, arrow_type: Any) -> Optional[tf.DType]:
    """The tensor dtype of a primitive Arrow type, or None if unsupported."""
    types = pa.types
    if types.is_dictionary(arrow_type):
        # Dictionary-encoded columns (pandas categoricals) are read decoded.
        arrow_type = arrow_type.value_type
    if types.is_string(arrow_type) or types.is_large_string(arrow_type) or \
            types.is_binary(arrow_type) or types.is_large_binary(arrow_type):
        return tf.string
    # Compared type by type: DataType.to_pandas_dtype needs pandas in
    # pyarrow 25 (not in 26), and pandas is not a requirement.
    for arrow, dtype in ((pa.bool_(), tf.bool), (pa.int8(), tf.int8),
                         (pa.int16(), tf.int16), (pa.int32(), tf.int32),
                         (pa.int64(), tf.int64), (pa.uint8(), tf.uint8),
                         (pa.uint16(), tf.uint16), (pa.uint32(), tf.uint32),
                         (pa.uint64(), tf.uint64), (pa.float16(), tf.float16),
                         (pa.float32(), tf.float32),
                         (pa.float64(), tf.float64)):
        if arrow_type == arrow:
            return dtype
    return None


def _file_column(schema: Any, name: str, path: str) -> Tuple[int, tf.DType]:
    """(list depth, values' tensor dtype) of column ``name`` of a file.

    Raises:
      ValueError: the file has no such column.
      TypeError: the column's type has no tensor equivalent.
    """
    pa, _ = pyarrow_modules()
    index = schema.get_field_index(name)
    if index < 0:
        raise ValueError("column %r is not in %s (its columns: %s)" % (
            name, path, ", ".join(schema.names)))
    arrow_type = item_type = schema.field(index).type
    depth = 0
    while pa.types.is_list(item_type) or pa.types.is_large_list(item_type):
        item_type, depth = item_type.value_type, depth + 1
    dtype = _tf_dtype(pa, item_type)
    if dtype is None:
        raise TypeError("column %r of %s has type %s, which "
                        "ParquetDataset does not support (scalar or (nested) "
                        "list columns of numbers, booleans or strings)" % (
                            name, path, arrow_type))
    return depth, dtype


def _kind(depth: int) -> str:
    if depth < 2:
        return "list" if depth else "scalar"
    return "nested list (ragged_rank=%d)" % depth


def _check_castable(name: str, path: str, file_dtype: tf.DType,
                    dtype: tf.DType) -> None:
    """Numbers and booleans cast to each other; strings only to strings.

    Raises:
      ValueError: one of the dtypes is tf.string and the other is not.
    """
    if (file_dtype == tf.string) != (dtype == tf.string):
        raise ValueError(
            "column %r of %s holds %s values, but its DataFrame.Field asks "
            "for %s; ParquetDataset casts between numeric and boolean "
            "dtypes only, not between strings and numbers" % (
                name, path, file_dtype.name, dtype.name))


def _check_field(field: "DataFrame.Field", depth: int, path: str) -> None:
    """Checks a Field against a file's column of list depth ``depth``.

    Raises:
      ValueError: the Field's ragged_rank, shape or sparse does not fit the
        column; names the column, the file and what differs.
    """
    name = field.name
    if field.shape.rank:
        if depth != 1:
            raise ValueError(
                "column %r of %s is a %s column, but its DataFrame.Field "
                "gives shape=%s, which reads a list column (ragged_rank=1) "
                "of fixed length" % (name, path, _kind(depth),
                                     field.shape.as_list()))
        return
    if field.ragged_rank is not None and field.ragged_rank != depth:
        hint = ""
        if depth == 1 and field.ragged_rank == 0:
            hint = ("; a list column whose rows all hold n items reads as a "
                    "dense tensor with DataFrame.Field(%r, shape=[n])" % name)
        raise ValueError("column %r of %s is a %s column, but its Field says "
                         "ragged_rank=%d%s" % (name, path, _kind(depth),
                                               field.ragged_rank, hint))
    if field.sparse and not depth:
        raise ValueError("column %r of %s is a scalar column; sparse=True "
                         "needs a list column" % (name, path))


def resolve_columns(schema: Any, fields: Any, path: str) -> List[Column]:
    """The columns to read, typed from the first file's schema.

    Args:
      schema: the file's Arrow schema.
      fields: the ``fields`` argument (None: every column of the file).
      path: the file (named in errors).

    Returns:
      One Column per selected column, in order.

    Raises:
      ValueError: no column is selected, a column is missing, or a
        Field's ragged_rank, shape or dtype (string vs number) disagrees
        with the file.
      TypeError: a column's type has no tensor equivalent.
    """
    wanted = as_dict(fields if fields is not None else schema.names)
    if not wanted:
        raise ValueError("ParquetDataset: no columns to read (%s)" % (
            "fields is empty" if fields is not None else
            "%s has no columns" % path))
    columns = []
    for name, field in wanted.items():
        depth, dtype = _file_column(schema, name, path)
        _check_field(field, depth, path)
        if field.dtype is not None:
            _check_castable(name, path, dtype, field.dtype)
        ragged_rank = depth
        if field.shape.rank and field.ragged_rank is not None:
            ragged_rank = field.ragged_rank
        columns.append(Column(name, field.dtype or dtype, depth,
                               field.sparse, file_dtype=dtype,
                               cast=field.dtype is not None,
                               ragged_rank=ragged_rank,
                               shape=field.shape.as_list()))
    return columns


def check_columns(columns: List[Column], schema: Any, path: str,
                   reference: Optional[str]) -> None:
    """Checks that a file holds ``columns`` as they will be read.

    Args:
      columns: the columns, typed from ``reference`` or from typed Fields.
      schema: the file's Arrow schema.
      path: the file.
      reference: the first file (whose schema typed ``columns``), or None
        when the columns come from typed DataFrame.Fields.

    Raises:
      ValueError: a column is missing, has another list depth (a list
        column in one and a scalar column in the other), holds strings in
        one and numbers in the other, or (without a Field dtype to cast
        to) holds another numeric dtype than in ``reference``; the message
        names both.
      TypeError: a column's type has no tensor equivalent.
    """
    for column in columns:
        depth, dtype = _file_column(schema, column.name, path)
        if depth != column.depth:
            if reference is None:
                _check_field(column.field(), depth, path)
            raise ValueError(
                "column %r is a %s column in %s but a %s column in %s; every "
                "file must have the same schema" % (
                    column.name, _kind(column.depth), reference,
                    _kind(depth), path))
        if reference is None or column.cast:
            _check_castable(column.name, path, dtype, column.dtype)
        elif dtype != column.file_dtype:
            raise ValueError(
                "column %r holds %s values in %s but %s values in %s; give "
                "its dtype as hb.data.DataFrame.Field(%r, dtype=...) to cast "
                "every file to one dtype" % (
                    column.name, column.file_dtype.name, reference,
                    dtype.name, path, column.name))


def typed_columns(fields: Any) -> List[Column]:
    """Columns from fully typed Fields (filenames given as a dataset, whose
    files are first seen when read).

    Raises:
      ValueError: no fields, or a Field without dtype and ragged_rank (a
        fixed ``shape`` stands for ragged_rank=1), or sparse=True on a
        scalar column.
    """
    message = ("ParquetDataset: with filenames given as a tf.data.Dataset "
               "(or a tensor whose value is not known yet), fields must list "
               "every column as hb.data.DataFrame.Field with dtype and "
               "ragged_rank")
    if not fields:
        raise ValueError(message)
    columns = []
    for field in as_dict(fields).values():
        fixed = bool(field.shape.rank)
        if field.dtype is None or (field.ragged_rank is None and not fixed):
            raise ValueError("%s; %r lacks them" % (message, field))
        if field.sparse and not field.ragged_rank:
            raise ValueError("ParquetDataset: %r: sparse=True needs a list "
                             "column (ragged_rank >= 1)" % (field,))
        depth = 1 if fixed else field.ragged_rank
        columns.append(Column(
            field.name, field.dtype, depth, field.sparse,
            ragged_rank=1 if field.ragged_rank is None else field.ragged_rank,
            shape=field.shape.as_list()))
    return columns
