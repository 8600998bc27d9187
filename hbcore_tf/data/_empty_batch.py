"""An empty batch (leading dimension 0) with the structure of a dataset's
elements, built from the dataset's ``element_spec``.

Data sync feeds such batches to ranks that ran out of data while other
ranks still train (``drop_remainder=False``). The batch must flow through
the same model code as a real one, so every component keeps its dtype and
every non-batch dimension keeps its size:

- dense ``tf.TensorSpec`` [B, d1, ..., dk]   -> zeros [0, d1, ..., dk];
- ``tf.RaggedTensorSpec`` [B, (r1), ..., dk] -> a ragged tensor with no
  rows whose flat values are zeros [0, <uniform inner dims>];
- ``hb.data.DataFrame.Value`` of specs       -> values zeros [0, <fixed
  shape>], every row-splits vector [0];
- ``tf.SparseTensorSpec`` [B, d1, ...]       -> no values, dense_shape
  [0, d1, ...]; an unknown d_i becomes 0 (a sparse batch's width usually
  varies from batch to batch, and no value lies outside an empty shape).

An unknown dense (or ragged inner uniform) non-batch dimension has no size
that the model would accept, so it is an error naming the component.
"""
from typing import Any, List

import tensorflow as tf

from hbcore_tf.data.dataframe import DataFrame


def empty_batch(element_spec: Any) -> Any:
    """Builds an empty batch matching ``element_spec``.

    Args:
      element_spec: a dataset's ``element_spec`` (nested dicts, tuples and
        lists of TensorSpec, RaggedTensorSpec, SparseTensorSpec and
        DataFrame.Value of TensorSpecs).

    Returns:
      The same nested structure of tensors, each with leading dimension 0.

    Raises:
      ValueError: a component has unknown rank, is a scalar (no batch
        dimension), or has an unknown non-batch dimension (dense, or a
        ragged tensor's uniform inner dimension). The message names the
        component's path in the element.
      TypeError: a component is not a dense, ragged or sparse tensor.
    """
    paths_and_specs = _flatten_with_paths(element_spec)
    # A DataFrame.Value is one component here but several leaves to tf.nest.
    tensors = [leaf for path, spec in paths_and_specs
               for leaf in tf.nest.flatten(_empty_component(path, spec))]
    return tf.nest.pack_sequence_as(element_spec, tensors,
                                    expand_composites=False)


def _flatten_with_paths(element_spec: Any) -> List[Any]:
    # (path, spec) pairs in tf.nest's flattening order (dicts by sorted
    # key); Ragged/SparseTensorSpecs and DataFrame.Values are leaves.
    out = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, DataFrame.Value):
            out.append((path or "<element>", node))
        elif isinstance(node, dict):
            for key in sorted(node):
                walk(node[key], "%s[%r]" % (path, key))
        elif isinstance(node, (tuple, list)):
            for i, child in enumerate(node):
                walk(child, "%s[%d]" % (path, i))
        else:
            out.append((path or "<element>", node))

    walk(element_spec, "")
    return out


def _known_dims(path: str, spec: Any, dims: List[Any], what: str
                ) -> List[int]:
    for i, d in enumerate(dims):
        if d is None:
            raise ValueError(
                "data sync: component %r of the dataset's elements has an "
                "unknown size in %s dimension %d (spec %s); an empty batch "
                "for ranks that ran out of data needs every non-batch "
                "dimension known (e.g. batch with padded_shapes, or "
                "tf.ensure_shape / set_shape in a map before "
                "synchronizing)" % (path, what, i + 1, spec))
    return [int(d) for d in dims]


def _batch_shape(path: str, spec: Any) -> List[Any]:
    shape = spec.shape
    if shape.rank is None:
        raise ValueError(
            "data sync: component %r of the dataset's elements has unknown "
            "rank (spec %s); it needs a leading batch dimension and known "
            "rank" % (path, spec))
    if shape.rank == 0:
        raise ValueError(
            "data sync: component %r of the dataset's elements is a scalar "
            "(spec %s); every component needs a leading batch dimension "
            "(batch the dataset before synchronizing it)" % (path, spec))
    return shape.as_list()


def _empty_component(path: str, spec: Any) -> Any:
    if isinstance(spec, DataFrame.Value):
        values = _empty_component(path, spec.values)
        return DataFrame.Value(values, [tf.zeros([1], s.dtype)
                                        for s in spec.nested_row_splits])
    if isinstance(spec, tf.RaggedTensorSpec):
        dims = _batch_shape(path, spec)
        ragged_rank = spec.ragged_rank
        inner = _known_dims(path, spec, dims[ragged_rank + 1:],
                            "uniform inner")
        values = tf.zeros([0] + inner, spec.dtype)
        # No rows at any ragged level: every row_splits vector is [0].
        for _ in range(ragged_rank):
            values = tf.RaggedTensor.from_row_splits(
                values, tf.zeros([1], spec.row_splits_dtype), validate=False)
        return values
    if isinstance(spec, tf.SparseTensorSpec):
        dims = _batch_shape(path, spec)
        dense_shape = [0] + [0 if d is None else int(d) for d in dims[1:]]
        return tf.SparseTensor(
            indices=tf.zeros([0, len(dims)], tf.int64),
            values=tf.zeros([0], spec.dtype),
            dense_shape=tf.constant(dense_shape, tf.int64))
    if isinstance(spec, tf.TensorSpec):
        dims = _batch_shape(path, spec)
        inner = _known_dims(path, spec, dims[1:], "non-batch")
        return tf.zeros([0] + inner, spec.dtype)
    raise TypeError(
        "data sync: component %r of the dataset's elements is a %s; only "
        "dense, ragged and sparse tensors are supported" % (
            path, type(spec).__name__))
