"""Graph-mode variables initialised to one repeated value hold one copy.

In a tf.compat.v1 graph, ``tf.zeros_initializer`` / ``constant_initializer
(0.1)`` (the initial value of Adagrad's and Ftrl's accumulators, of Adam's
and Momentum's slots, of biases) is a ``Const`` or a ``Fill`` of constant
inputs. The session's graph optimizer (Grappler's constant folding) turns
either into a ``Const`` node: a splat is tiny in the graph whatever its
size. That node's kernel materialises the whole tensor when the session
first runs the initializer and keeps it for the life of the session (the
session caches the initializer's executor), and the variable's buffer is
that same tensor. The first update of the variable finds the buffer shared
and copies it (TensorFlow's copy-on-write), so from the first step on the
process holds the variable twice: for an embedding table trained with
Adagrad, one more table's worth of memory per table (measured: a 122 MiB
table's Adagrad accumulator takes 244 MiB after the first step).

Inside hb.scope, a variable creator rewrites such an initial value into
``tf.fill(shape, placeholder_with_default(value))``. Constant folding leaves
placeholders alone, so the tensor is computed by each run of the
initializer, owned by the variable alone, and nothing is copied. The
values are identical. Only graph-mode variables of at least ``_MIN_BYTES``
whose initial value is a splat ``Const`` or a ``Fill`` of constants are
rewritten.
"""
from typing import Any, Callable

import tensorflow as tf

from hbcore_tf._patches import internals

# Smaller constants are left alone: the memory is not worth a graph change.
_MIN_BYTES = 1 << 20


def _splat_scalar(tensor: Any) -> Any:
    """The repeated value of a splat ``Const``, or of a ``Fill`` of
    constants, of at least ``_MIN_BYTES``, as a numpy scalar; None for
    anything else."""
    from tensorflow.core.framework import tensor_pb2

    if not isinstance(tensor, tf.Tensor):
        return None
    shape = tensor.shape
    if not shape.is_fully_defined() or tensor.dtype == tf.string:
        return None
    if shape.num_elements() * tensor.dtype.size < _MIN_BYTES:
        return None
    if tensor.op.type == "Fill":
        value = internals.CONSTANT_VALUE.load()(tensor.op.inputs[1])
        return None if value is None else value
    if tensor.op.type != "Const":
        return None
    proto = tensor.op.get_attr("value")
    # A splat holds exactly one value in one typed field. Explicit values
    # sit in tensor_content; tf.compat.v1's constant([1., 2., 3.],
    # shape=[n]) holds three values, the last one repeated: not a splat.
    values = [v for field, v in proto.ListFields()
              if field.name.endswith("_val")]
    if proto.tensor_content or len(values) != 1 or len(values[0]) != 1:
        return None
    scalar = tensor_pb2.TensorProto()
    scalar.CopyFrom(proto)
    scalar.tensor_shape.Clear()
    return internals.MAKE_NDARRAY.load()(scalar)


def fill_splat_initial_values(next_creator: Callable, **kwargs: Any) -> Any:
    """Variable creator (tf.variable_creator_scope) of hb.scope: see the
    module docstring.

    Args:
        next_creator: the next creator on TensorFlow's stack.
        **kwargs: the variable's arguments.

    Returns:
        The variable made by ``next_creator``.
    """
    initial = kwargs.get("initial_value")
    if tf.executing_eagerly() or tf.inside_function() or not callable(initial):
        return next_creator(**kwargs)

    def filled_initial_value():
        value = initial()
        scalar = _splat_scalar(value)
        if scalar is None:
            return value
        unfoldable = tf.compat.v1.placeholder_with_default(
            tf.constant(scalar, value.dtype), [])
        return tf.fill(value.shape, unfoldable)

    kwargs["initial_value"] = filled_initial_value
    return next_creator(**kwargs)
