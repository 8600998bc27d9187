"""``hb.keras.metrics``: Keras metrics whose result is over every rank's examples.

    model.compile(..., metrics=[hb.keras.metrics.AUC(name="auc"),
                                hb.keras.metrics.BinaryAccuracy()])

Each class subclasses the Keras class of the same name (Keras 3, or tf_keras
when TF_USE_LEGACY_KERAS=1) and takes the same arguments. ``update_state``
accumulates this rank's state as usual. ``result()`` called eagerly sums
the state variables over ranks (one fused allreduce), computes the Keras
result from the sums, and puts the local state back, so later updates keep
counting this rank's examples only. Inside a compiled step (a
tf.function), ``result()`` is this rank's own value.

Why: model.fit and model.evaluate call result() inside every compiled
step (for the progress bar) and then once, eagerly, at the end of each
epoch and of each evaluation (the values that reach History, callbacks
and ``evaluate``'s return). Ranks with unbalanced data run different
numbers of steps, so only the eager end-of-epoch call happens the same
number of times on every rank; making just that call a collective gives
global epoch values and can never hang. Consequences: the per-step
progress bar shows this rank's running value; with ``run_eagerly=True``
every step's result() is a collective, so every rank must then run the
same number of steps (hb.data.synchronized makes sure of that).
"""
from typing import Any, Dict, List

import tensorflow as tf

from hbcore_tf import mpi_ops
from hbcore_tf._base import compat as _compat

_WRAPPED = ["AUC", "Accuracy", "BinaryAccuracy", "CategoricalAccuracy",
            "SparseCategoricalAccuracy", "TopKCategoricalAccuracy",
            "SparseTopKCategoricalAccuracy", "Mean", "Sum", "Precision",
            "Recall", "TruePositives", "TrueNegatives", "FalsePositives",
            "FalseNegatives", "MeanSquaredError", "MeanAbsoluteError",
            "BinaryCrossentropy", "CategoricalCrossentropy",
            "SparseCategoricalCrossentropy"]


def _state_variables(metric: Any) -> List[Any]:
    return list(metric.variables)


class _GlobalResultMixin:
    """Overrides result() to compute the metric from the ranks' summed state."""

    def result(self) -> Any:
        state = _state_variables(self)
        if not state or mpi_ops.size() == 1 or tf.inside_function():
            return super().result()
        local = [tf.identity(tf.convert_to_tensor(v)) for v in state]
        summed = mpi_ops.grouped_allreduce(
            local, op=mpi_ops.Sum, name="%s_global_state" % self.name)
        for variable, value in zip(state, summed):
            variable.assign(value)
        value = tf.nest.map_structure(tf.identity, super().result())
        with tf.control_dependencies(tf.nest.flatten(value)):
            for variable, original in zip(state, local):
                variable.assign(original)
        return value


def _global_class(base: type) -> type:
    cls = type(base.__name__, (_GlobalResultMixin, base), {
        "__doc__": "%s over every rank's examples (see hbcore_tf.keras."
                   "metrics).\n\n%s" % (base.__name__, base.__doc__ or ""),
        "__module__": __name__,
    })
    cls.__qualname__ = base.__name__
    return cls


def _build() -> Dict[str, type]:
    keras = _compat.keras_module()
    classes = {}
    for name in _WRAPPED:
        base = getattr(keras.metrics, name, None)
        if base is not None:
            classes[name] = _global_class(base)
    return classes


globals().update(_build())

__all__ = sorted(n for n in _WRAPPED if n in globals())
