"""The data-parallel classes behind ``hb.scope`` and ``hb.train``.

An object becomes data-parallel by becoming an instance of a subclass of
its own class (``isinstance`` still holds, and class names, variable names
and checkpoint keys do not change):

- tf.compat.v1.train optimizers: ``v1_class(base)`` overrides
  ``compute_gradients`` (which ``minimize`` calls) to average the
  gradients over ranks; ``apply_gradients`` is the base class's, so slot
  variables keep their names.
- Keras 3 and tf_keras optimizers: hbcore_tf._parallel.distributed_optimizer'
  ``distributed_keras_class`` (the same subclass DistributedOptimizer
  uses).
- Keras models (Keras 3 and tf_keras): ``model_class(base)`` runs
  ``train_step`` under the data-sync step weight of its batch
  (hbcore_tf._parallel.step_weight), and makes ``fit`` broadcast the model's and
  the optimizer's variables (slots built first) from rank 0 before the
  first step.

Every reduction uses ``BucketReducer``: ``grad_nbuckets`` fused
grouped_allreduce calls per step, over the gradients in REVERSE variable
order (the last layers' gradients are computed first in backprop, so the
first group is ready first; PyTorch DDP builds its buckets the same way).
The plan depends only on the variable list, so every rank issues the same
collectives.
"""
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.options import options
from hbcore_tf._parallel import distributed_optimizer as hvd_optimizers
from hbcore_tf._parallel import step_weight as _step_weight
from hbcore_tf._parallel.gradient_reduction import GradientReducer
from hbcore_tf._parallel.hooks import BroadcastGlobalVariablesHook
from hbcore_tf.compression import Compression
from hbcore_tf.functions import broadcast_variables
from hbcore_tf.mpi_ops import Average
from hbcore_tf.process_sets import global_process_set

REDUCER_NAME = "HbDataParallel"


class BucketReducer(GradientReducer):
    """GradientReducer whose integer ``groups`` split the gradients in
    reverse variable order (group 0 holds the last variables)."""

    def _plan(self, variables: Sequence[Any], indices: List[int]
              ) -> List[List[int]]:
        if not isinstance(self.groups, int) or not indices:
            return super()._plan(variables, indices)
        k = min(self.groups, len(indices))
        reverse = list(reversed(indices))
        return [sorted(int(i) for i in part)
                for part in np.array_split(reverse, k) if len(part)]


def make_reducer(name: str = REDUCER_NAME) -> BucketReducer:
    """A reducer with the current ``grad_nbuckets`` option."""
    return BucketReducer(name, groups=int(options.grad_nbuckets) or None)


# --- tf.compat.v1 ---------------------------------------------------------------

_v1_classes: Dict[type, type] = {}


def _v1_compute_gradients(base: type) -> Any:
    def compute_gradients(self, *args, **kwargs):
        """The base class's gradients, averaged over all ranks."""
        pairs = base.compute_gradients(self, *args, **kwargs)
        reducer = self.__dict__.get("_hb_reducer")
        if reducer is None:
            reducer = make_reducer()
            self._hb_reducer = reducer
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        return list(zip(reducer.reduce(grads, variables), variables))
    return compute_gradients


def _make_session_run_hook(self: Any) -> Any:
    """HybridBackend's ``optimizer.make_session_run_hook()``: a hook that
    gives every rank rank 0's values of the replicated variables (sharded
    tables and their slots keep each rank's rows) right after the session
    is created or restored, for sessions that do not broadcast by
    themselves (hb.train.MonitoredTrainingSession already does; running
    both costs one more broadcast at start).

    Returns:
        A BroadcastGlobalVariablesHook(0).
    """
    return BroadcastGlobalVariablesHook(0)


def v1_class(base: type, name: str = "", module: str = "") -> type:
    """The data-parallel subclass of a tf.compat.v1.train.Optimizer class.

    Args:
        base: the optimizer class.
        name: the subclass's ``__name__`` (default: base's).
        module: its ``__module__`` (default: base's).
    """
    if getattr(base, "_hb_distributed", False):
        return base
    key = (base, name, module)
    if key not in _v1_classes:
        def __init__(self, *args, **kwargs):
            base.__init__(self, *args, **kwargs)
            self._hb_reducer = make_reducer()

        _v1_classes[key] = type(name or base.__name__, (base,), {
            "__init__": __init__,
            "__module__": module or base.__module__,
            "__qualname__": name or base.__qualname__,
            "__doc__": base.__doc__,
            "_hb_distributed": True,
            "compute_gradients": _v1_compute_gradients(base),
            "make_session_run_hook": _make_session_run_hook,
        })
    return _v1_classes[key]


# --- Keras optimizers ---------------------------------------------------------------

_keras_classes: Dict[Tuple[type, str], type] = {}


def _settings() -> Any:
    class _BucketSettings(hvd_optimizers._Settings):
        def reducer(self, default_name: str) -> GradientReducer:
            return BucketReducer(self.name or default_name,
                                 groups=self.groups)

    return _BucketSettings(
        None, Compression.none, False, 1, Average, 1.0, False,
        int(options.grad_nbuckets) or None, "", "", global_process_set, True)


def make_data_parallel(obj: Any) -> None:
    """Turns an optimizer instance into its data-parallel subclass in
    place (no-op when it already is one or is a wrapper such as
    hvd.DistributedOptimizer's v1 wrapper or a loss-scale optimizer).

    Raises:
        ValueError: not an optimizer of a supported family.
    """
    cls = type(obj)
    if getattr(cls, "_hb_distributed", False) or isinstance(
            obj, hvd_optimizers._DistributedV1Optimizer):
        return
    if _compat.is_loss_scale_optimizer(obj):
        # The optimizer it holds reduces (made data-parallel when created
        # in the scope); the wrapper then decides on reduced gradients
        # (hbcore_tf._parallel.loss_scale). Reducing in both would
        # allreduce every gradient twice.
        return
    family = _compat.optimizer_family(obj)
    if family == _compat.V1:
        object.__setattr__(obj, "__class__", v1_class(cls))
        obj._hb_reducer = make_reducer()
        return
    settings = _settings()
    key = (cls, family)
    if key not in _keras_classes:
        _keras_classes[key] = hvd_optimizers.distributed_keras_class(
            cls, settings, family)
    object.__setattr__(obj, "__class__", _keras_classes[key])
    obj._hb_runtime = hvd_optimizers._Runtime(settings, REDUCER_NAME)


# --- Keras models -----------------------------------------------------------------------

_model_classes: Dict[type, type] = {}


def _optimizer_variables(optimizer: Any) -> List[Any]:
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def broadcast_model(model: Any) -> None:
    """Broadcasts a built model's variables and its optimizer's (slots
    created first) from rank 0, eagerly. Unbuilt models are left alone
    (their variables are broadcast when created inside hb.scope)."""
    if not getattr(model, "built", False):
        return
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        family = _compat.optimizer_family(optimizer)
        _compat.build_optimizer(optimizer, family,
                                list(model.trainable_variables))
        variables += _optimizer_variables(optimizer)
    seen, unique = set(), []
    for v in variables:
        key = _compat.variable_key(v)
        if key not in seen:
            seen.add(key)
            unique.append(v)
    if unique:
        broadcast_variables(unique, 0)


def _first_of(data: Any) -> Any:
    return data[0] if isinstance(data, (tuple, list)) else data


def model_class(base: type) -> type:
    """The data-parallel subclass of a Keras model class (same name and
    module, so saved models name the plain class)."""
    if getattr(base, "_hb_model", False):
        return base
    if base not in _model_classes:
        def train_step(self, data):
            # The step weight: 0.0 when data sync gave this rank an empty
            # batch, so the gradient reduction leaves its gradient out.
            weight = _step_weight.batch_weight(_first_of(data))
            with _step_weight.using(weight):
                return base.train_step(self, data)

        def fit(self, *args, **kwargs):
            broadcast_model(self)
            return base.fit(self, *args, **kwargs)

        _model_classes[base] = type(base.__name__, (base,), {
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
            "_hb_model": True,
            "train_step": train_step,
            "fit": fit,
        })
    return _model_classes[base]


def make_data_parallel_model(model: Any) -> None:
    """Turns a Keras model instance into its data-parallel subclass."""
    cls = type(model)
    if not getattr(cls, "_hb_model", False):
        object.__setattr__(model, "__class__", model_class(cls))
