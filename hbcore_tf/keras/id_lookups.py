"""The call contract shared by hbcore's embedding layers
(``ShardedEmbedding``, ``DynamicEmbedding``): what ids a layer accepts and
how bags are combined, over the one lookup each layer defines.

- Dense ids of any shape give ``ids.shape + [output_dim]``.
- A RaggedTensor with ``combiner=None`` gives a RaggedTensor.
- With a combiner (``"sum"``, ``"mean"``, ``"sqrtn"``) the last dimension
  of the ids (ragged, sparse or dense) is a bag reduced like
  ``tf.nn.safe_embedding_lookup_sparse`` (an empty bag gives zeros).
- SparseTensor ids need a combiner.

A layer using it (before keras' Layer in its bases) defines ``_lookup``
(flat or shaped ids -> rows), ``_table_name()`` (the collective names'
base), ``combiner``, ``output_dim`` and ``_hb_graph_calls`` (a
WeakKeyDictionary), and names itself in errors by ``_HB_KIND``.
"""
from typing import Any, Optional

import tensorflow as tf

COMBINERS = (None, "sum", "mean", "sqrtn")


def check_combiner(kind: str, combiner: Optional[str]) -> None:
    """Raises ValueError naming the layer kind for an unknown combiner.

    Args:
        kind: the layer's class name, for the message.
        combiner: the requested combiner.

    Raises:
        ValueError: ``combiner`` is not one of ``COMBINERS``.
    """
    if combiner not in COMBINERS:
        raise ValueError(
            "%s: combiner %r is not one of None, 'sum', 'mean', 'sqrtn'" %
            (kind, combiner))


def combine(rows: tf.Tensor, segments: tf.Tensor, num_segments: Any,
            combiner: str) -> tf.Tensor:
    """Reduces ``rows`` [n, dim] into ``num_segments`` bags (empty bags are
    zeros), as embedding_lookup_sparse does without weights.

    Args:
        rows: the looked-up rows.
        segments: the bag of each row.
        num_segments: the number of bags.
        combiner: "sum", "mean" or "sqrtn".

    Returns:
        A ``[num_segments, dim]`` tensor.
    """
    summed = tf.math.unsorted_segment_sum(rows, segments, num_segments)
    if combiner == "sum":
        return summed
    counts = tf.math.unsorted_segment_sum(
        tf.ones_like(segments, dtype=rows.dtype), segments, num_segments)
    if combiner == "sqrtn":
        counts = tf.sqrt(counts)
    return tf.math.divide_no_nan(summed, counts[:, None])


class IdLookupCalls:
    """``call`` and ``compute_output_shape`` of an embedding layer over its
    ``_lookup`` (see the module docstring)."""

    _HB_KIND = "embedding layer"

    def _collective_name(self) -> str:
        """The lookup's collective name: the table's, numbered per call
        inside one traced function (a table shared by two features);
        eager calls run one by one and share it."""
        base = "%s_lookup" % self._table_name().replace("/", "_")
        if tf.executing_eagerly():
            return base
        graph = tf.compat.v1.get_default_graph()
        count = self._hb_graph_calls.get(graph, 0)
        self._hb_graph_calls[graph] = count + 1
        return base if count == 0 else "%s_%d" % (base, count)

    def _ragged(self, ids: tf.RaggedTensor) -> Any:
        if self.combiner is None:
            return ids.with_flat_values(self._lookup(ids.flat_values))
        if ids.flat_values.shape.rank != 1:
            raise ValueError(
                "%s %r: with a combiner, the last dimension of ragged ids "
                "must be the ragged one" % (self._HB_KIND, self.name))
        splits = ids.nested_row_splits[-1]
        rows = self._lookup(ids.flat_values)
        bags = combine(rows, tf.ragged.row_splits_to_segment_ids(splits),
                       tf.shape(splits)[0] - 1, self.combiner)
        if ids.ragged_rank == 1:
            return bags
        return tf.RaggedTensor.from_nested_row_splits(
            bags, ids.nested_row_splits[:-1], validate=False)

    def _sparse(self, ids: tf.SparseTensor) -> tf.Tensor:
        if self.combiner is None:
            raise ValueError(
                "%s %r: SparseTensor ids need a combiner ('sum', 'mean' or "
                "'sqrtn')" % (self._HB_KIND, self.name))
        rank = ids.shape.rank
        if rank is None or rank < 1:
            raise ValueError("%s %r: SparseTensor ids need a known rank" %
                             (self._HB_KIND, self.name))
        outer = ids.dense_shape[:-1]
        strides = tf.math.cumprod(outer, exclusive=True, reverse=True)
        segments = tf.reduce_sum(ids.indices[:, :-1] * strides, axis=1)
        bags = combine(self._lookup(ids.values), segments,
                       tf.reduce_prod(outer), self.combiner)
        out = tf.reshape(bags, tf.concat([outer, [self.output_dim]], 0))
        out.set_shape(ids.shape[:-1].concatenate([self.output_dim]))
        return out

    def call(self, inputs: Any) -> Any:
        if isinstance(inputs, tf.RaggedTensor):
            return self._ragged(inputs)
        if isinstance(inputs, tf.SparseTensor):
            return self._sparse(inputs)
        out = self._lookup(inputs)
        if self.combiner is None:
            return out
        # Dense ids with a combiner: the last dimension is a full bag.
        if self.combiner == "sum":
            return tf.reduce_sum(out, axis=-2)
        if self.combiner == "mean":
            return tf.reduce_mean(out, axis=-2)
        count = tf.cast(tf.shape(out)[-2], out.dtype)
        return tf.reduce_sum(out, axis=-2) / tf.sqrt(count)

    def compute_output_shape(self, input_shape: Any) -> Any:
        shape = tuple(tf.TensorShape(input_shape).as_list())
        if self.combiner is not None:
            shape = shape[:-1]
        return shape + (self.output_dim,)
