"""``hb.keras.layers.DenseFeatures``: HybridBackend's feature-column layer,
its embedding tables sharded across ranks.

    with hb.scope():
        columns = [tf.feature_column.embedding_column(
            tf.feature_column.categorical_column_with_identity("ad", 10000),
            dimension=16), tf.feature_column.numeric_column("price")]
        x = hb.keras.layers.DenseFeatures(columns)(features)  # [batch, 17]

Which Keras: feature columns are a tf_keras feature (Keras 3 has none), so
the layer is a tf_keras ``Layer`` whatever ``TF_USE_LEGACY_KERAS`` says,
like ``tf_keras.layers.DenseFeatures``; it needs tf_keras installed. It
runs where HybridBackend's layer runs: while building a tf.compat.v1
graph (its tables are made by tf.compat.v1 ``get_variable``, through
hbcore_tf.embedding.feature_columns, so they are hbcore's sharded tables:
they reshard, checkpoint in id order under
``<layer>/<column>_embedding/embedding_weights`` and export as plain
variables like every other). Eagerly or inside a tf.function it raises
RuntimeError.

What a call computes is ``tf_keras.layers.DenseFeatures``'s: every column's
dense tensor ``[batch, width]``, in name order, concatenated (or, with
``enable_concat=False``, the list of them, HybridBackend's option). The
first call in a graph creates the tables in a variable scope of the
layer's name; later calls in that graph reuse them. The tables are listed
in the layer's ``trainable_weights`` / ``non_trainable_weights``.

``num_groups`` (default: the ``emb_num_groups`` option; None: one group
per column) is HybridBackend's number of coalesced lookup groups, validated
and kept (``layer.num_groups``). hbcore needs no grouping to coalesce: its
core fuses the alltoalls that are ready in the same cycle into one
exchange (docs/embedding.md), so the columns' id exchanges travel together
whatever the groups; the values do not depend on it.
"""
import weakref
from typing import Any, Dict, List, Optional, Sequence

import tensorflow as tf

from hbcore_tf._patches import internals
from hbcore_tf.embedding.feature_columns import (build_columns,
                                                 check_graph_mode,
                                                 normalize_columns)
from hbcore_tf._base.options import options, validate

_CLASS: List[type] = []


def _dense_inputs(features: Any) -> Any:
    """SparseTensorValues as SparseTensors (Keras would convert their
    fields one by one), everything else unchanged."""
    if not isinstance(features, dict):
        return features
    return {k: (tf.SparseTensor.from_value(v)
                if isinstance(v, tf.compat.v1.SparseTensorValue) else v)
            for k, v in features.items()}


def _make_class() -> type:
    try:
        import tf_keras
    except ImportError:
        raise ImportError(
            "hb.keras.layers.DenseFeatures is a tf_keras layer (Keras 3 "
            "has no feature columns): pip install tf_keras") from None

    @tf_keras.utils.register_keras_serializable(package="hbcore_tf")
    class DenseFeatures(tf_keras.layers.Layer):
        """A layer of dense tensors from ``feature_columns``, embedding
        tables sharded across ranks (HybridBackend's
        ``hb.keras.layers.DenseFeatures``; module docstring)."""

        def __init__(self, feature_columns: Sequence[Any],
                     trainable: bool = True, name: Optional[str] = None,
                     **kwargs: Any) -> None:
            """A layer over ``feature_columns``.

            Args:
                feature_columns: dense feature columns (v1 or v2;
                    tf.compat.v1 ``shared_embedding_columns`` too),
                    distinct names.
                trainable: whether the tables and other variables train.
                name: the layer's name (and its variable scope's).
                **kwargs: ``num_groups`` (int >= 1 or None; default the
                    ``emb_num_groups`` option), ``enable_concat`` (bool;
                    default the ``emb_enable_concat`` option), and Keras
                    layer arguments.

            Raises:
                ValueError: no columns, a name twice, a ``num_groups`` < 1.
                TypeError: a ``num_groups`` or ``enable_concat`` of the
                    wrong type.
            """
            num_groups = kwargs.pop("num_groups", options.emb_num_groups)
            if num_groups is not None:
                num_groups = validate("emb_num_groups", num_groups)
            enable_concat = validate(
                "emb_enable_concat",
                kwargs.pop("enable_concat", options.emb_enable_concat))
            super().__init__(trainable=trainable, name=name, **kwargs)
            self._feature_columns = normalize_columns(feature_columns)
            self._num_groups = num_groups
            self._enable_concat = enable_concat
            # graph -> the variable scope of this layer's tables there
            self._scopes: Any = weakref.WeakKeyDictionary()

        @property
        def num_groups(self) -> Optional[int]:
            """HybridBackend's number of coalesced lookup groups."""
            return self._num_groups

        @property
        def enable_concat(self) -> bool:
            """Whether a call concatenates the columns' tensors."""
            return self._enable_concat

        def build(self, input_shape: Any) -> None:
            # The tables are made in the first call (get_variable).
            self.built = True

        def __call__(self, features: Any, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(_dense_inputs(features), *args, **kwargs)

        @tf.autograph.experimental.do_not_convert
        def call(self, features: Any, cols_to_output_tensors: Optional[
                Dict[Any, tf.Tensor]] = None, training: Any = None) -> Any:
            """The columns' dense tensors (module docstring).

            Args:
                features: mapping from feature key to Tensor /
                    SparseTensor.
                cols_to_output_tensors: if given, filled with
                    ``{column: tensor}``.
                training: unused (Keras' argument).

            Returns:
                ``[batch, total width]`` (enable_concat), else the list of
                ``[batch, width]`` tensors in name order.

            Raises:
                ValueError: ``features`` is not a dict, or a column hbcore
                    cannot shard.
                RuntimeError: called eagerly or inside a tf.function.
            """
            del training
            check_graph_mode("hb.keras.layers.DenseFeatures")
            if not isinstance(features, dict):
                raise ValueError("hb.keras.layers.DenseFeatures expects a "
                                 "dict from feature key to tensor, got %s"
                                 % type(features).__name__)
            graph = tf.compat.v1.get_default_graph()
            scope = self._scopes.get(graph)
            outputs: Dict[Any, tf.Tensor] = {}
            with tf.compat.v1.variable_scope(
                    scope, default_name=None if scope else self.name,
                    reuse=True if scope else None,
                    auxiliary_name_scope=False) as opened:
                before = {id(v) for v in tf.compat.v1.global_variables()}
                build_columns(features, self._feature_columns, outputs)
            if scope is None:
                self._scopes[graph] = opened
                made = [v for v in tf.compat.v1.global_variables()
                        if id(v) not in before]
                trainable = {id(v) for v in
                             tf.compat.v1.trainable_variables()}
                for v in made:
                    (self._trainable_weights if id(v) in trainable
                     else self._non_trainable_weights).append(v)
            if cols_to_output_tensors is not None:
                cols_to_output_tensors.update(outputs)
            ordered = [outputs[c] for c in sorted(
                self._feature_columns, key=lambda c: c.name)]
            if not self._enable_concat:
                return ordered
            return tf.concat(ordered, 1)

        def compute_output_shape(self, input_shape: Any) -> Any:
            width = sum(int(c.variable_shape.num_elements())
                        for c in self._feature_columns)
            batch = next(iter(input_shape.values()))[0] if isinstance(
                input_shape, dict) else None
            return tf.TensorShape([batch, width])

        def get_config(self) -> Dict[str, Any]:
            config = super().get_config()
            config.update({
                "feature_columns": internals.FC_SERIALIZE.load()(
                    self._feature_columns),
                "num_groups": self._num_groups,
                "enable_concat": self._enable_concat})
            return config

        @classmethod
        def from_config(cls, config: Dict[str, Any],
                        custom_objects: Any = None) -> Any:
            config = dict(config)
            config["feature_columns"] = \
                internals.FC_DESERIALIZE.load()(
                    config["feature_columns"], custom_objects=custom_objects)
            return cls(**config)

    return DenseFeatures


def layer_class() -> type:
    """The DenseFeatures class (built on first use: it imports tf_keras).

    Raises:
        ImportError: tf_keras is not installed.
    """
    if not _CLASS:
        _CLASS.append(_make_class())
    return _CLASS[0]
