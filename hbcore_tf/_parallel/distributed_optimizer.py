"""DistributedOptimizer for Keras 3, tf_keras and tf.compat.v1 optimizers.

How each family is wrapped (the differences live in hbcore_tf._base.compat):

- Keras 3 (``keras.optimizers.*``): a subclass of the optimizer's own class,
  with the same ``__name__``, ``__qualname__`` and ``__module__``, built with
  ``from_config(optimizer.get_config())``. It overrides ``apply(grads,
  trainable_variables)``, which ``apply_gradients`` and ``model.fit``'s
  train step both go through, and allreduces the gradients there. A saved
  model records the plain class (e.g. ``keras.optimizers.SGD``), so it loads
  without hbcore.
- tf_keras (``TF_USE_LEGACY_KERAS=1``; current and ``legacy`` optimizers):
  the same kind of subclass, overriding ``apply_gradients``, which
  ``minimize`` and tf_keras' train step call. Legacy optimizers also get
  Horovod's ``get_gradients(loss, params)``, which returns reduced
  gradients (tf_keras' v1 graph mode ``model.fit`` goes through it and
  ``get_updates``); apply_gradients recognises those and does not reduce
  them again.
- tf.compat.v1.train.Optimizer: a wrapper (as in Horovod) whose
  ``compute_gradients`` returns allreduced gradients and whose
  ``apply_gradients`` delegates to the wrapped optimizer (so slot variables
  keep their names and checkpoints stay compatible).

Every step's gradients reach the core in one grouped_allreduce (see
hbcore_tf._parallel.gradient_reduction); with ``backward_passes_per_step`` > 1 they
are accumulated locally and reduced every N passes
(hbcore_tf._parallel.local_aggregation).
"""
import contextlib
import warnings
from typing import Any, List, Optional, Sequence

import tensorflow as tf

import hbcore
import hbcore.basics
from hbcore._native import core
from hbcore_tf import process_sets
from hbcore_tf._base import compat as _compat
from hbcore_tf._ops import branch_check
from hbcore_tf._parallel import keras_xla as _keras_xla
from hbcore_tf._parallel import loss_scale as _loss_scale
from hbcore_tf._parallel.gradient_reduction import (GradientReducer,
                                                    resolve_groups)
from hbcore_tf._parallel.local_aggregation import LocalGradientAggregator
from hbcore_tf._parallel.local_aggregation import (
    _as_deps as _local_aggregation_deps)
from hbcore_tf.compression import Compression
from hbcore_tf.mpi_ops import Average


class _Settings:
    """The DistributedOptimizer arguments a wrapped class is built with."""

    def __init__(self, name: Optional[str], compression: Any,
                 sparse_as_dense: bool, backward_passes_per_step: int,
                 op: Any, gradient_predivide_factor: float,
                 average_aggregated_gradients: bool,
                 groups: Any, device_dense: str, device_sparse: str,
                 process_set: Any, scale_local_gradients: bool,
                 bucket_bytes: int = 0) -> None:
        self.name = name
        self.bucket_bytes = bucket_bytes
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.average_aggregated_gradients = average_aggregated_gradients
        self.groups = groups
        self.device_dense = device_dense
        self.device_sparse = device_sparse
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        if self.backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got %r"
                             % (backward_passes_per_step,))

    def reducer(self, default_name: str) -> GradientReducer:
        return GradientReducer(
            self.name or default_name,
            compression=self.compression, sparse_as_dense=self.sparse_as_dense,
            op=self.op, gradient_predivide_factor=self.gradient_predivide_factor,
            groups=self.groups,
            device_dense=self.device_dense, device_sparse=self.device_sparse,
            process_set=self.process_set,
            scale_local_gradients=self.scale_local_gradients,
            bucket_bytes=self.bucket_bytes)

    def aggregator(self, prefix: str) -> Optional[LocalGradientAggregator]:
        if self.backward_passes_per_step == 1:
            return None
        return LocalGradientAggregator(self.backward_passes_per_step,
                                       self.average_aggregated_gradients,
                                       name=prefix + "_local_aggregation")


class _Runtime:
    """Per-instance state of a wrapped optimizer. A plain object (not a
    Trackable), so Keras and tf.train.Checkpoint do not save it."""

    def __init__(self, settings: _Settings, default_name: str) -> None:
        self.settings = settings
        self.reducer = settings.reducer(default_name)
        self.aggregator = settings.aggregator(self.reducer.name)
        # > 0 while a Keras 3 LossScaleOptimizer holding this optimizer
        # applies gradients it has already reduced through ``reducer``
        # (hbcore_tf._parallel.loss_scale): apply() then applies them as
        # they are.
        self.reduced_upstream = 0


# --- bucket_cap_mb (SageMaker data-parallel alias) --------------------------------

def _current_fusion_threshold() -> Optional[int]:
    try:
        text = core.config_string()
    except Exception:  # pylint: disable=broad-except
        return None
    for line in str(text).splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "HB_FUSION_THRESHOLD":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def apply_bucket_cap_mb(bucket_cap_mb: float, bucketed: bool = False) -> int:
    """Maps SageMaker's ``bucket_cap_mb`` onto hbcore.

    The core reads its configuration at ``init()``: before init this defers
    ``fusion_threshold`` to the next init (``hbcore.basics.defer_config``;
    the environment is left alone). After init (smddp scripts always call
    ``init()`` first) the gradients travel in buckets of at most that size
    instead, one grouped allreduce each (the core still fuses buckets
    ready in the same cycle), when the caller can bucket them
    (``bucketed``: no explicit groups); otherwise it warns when the running
    threshold differs.

    Args:
        bucket_cap_mb: the bucket size in MiB (0 or more).
        bucketed: whether the caller reduces the gradients in buckets (no
            explicit ``groups``/``num_groups``); only used after init.

    Returns:
        The bucket size in bytes for the gradient reducer (0: none; at
        least 1 when hbcore is initialized and ``bucketed``).

    Raises:
        ValueError: bucket_cap_mb is negative.
        hbcore.exceptions.ConfigError: before init, the resulting fusion
            threshold is outside the knob's range (over 2**40 bytes).
    """
    if bucket_cap_mb < 0:
        raise ValueError("bucket_cap_mb must be >= 0, got %r" % bucket_cap_mb)
    wanted = int(bucket_cap_mb * 1024 * 1024)
    if not hbcore.is_initialized():
        hbcore.basics.defer_config({"fusion_threshold": wanted})
        return 0
    if bucketed:
        return max(wanted, 1)
    current = _current_fusion_threshold()
    if current is not None and current != wanted:
        warnings.warn(
            "bucket_cap_mb=%s has no effect: hbcore is already initialized "
            "with a fusion threshold of %d bytes, and the threshold is read "
            "at init(). Create the DistributedOptimizer before hvd.init(), "
            "pass hvd.init(config={'fusion_threshold': %d}), or launch with "
            "hbrun --fusion-threshold-mb." % (bucket_cap_mb, current, wanted),
            stacklevel=3)
    return 0


# --- Keras 3 and tf_keras -------------------------------------------------------------

def _keras3_methods(base: type) -> dict:
    def apply(self, grads, trainable_variables=None):
        hb = self._hb_runtime
        grads = list(grads)
        if not grads or hb.reduced_upstream:
            return base.apply(self, grads, trainable_variables)
        if trainable_variables is None:
            if not self.built:
                return base.apply(self, grads, trainable_variables)  # raises
            variables = list(self._trainable_variables)
        else:
            variables = list(trainable_variables)
        if hb.aggregator is None:
            reduced = hb.reducer.reduce(grads, variables)
            return base.apply(self, reduced, trainable_variables)
        _compat.build_optimizer(self, _compat.KERAS3, variables)

        def apply_fn(aggregated):
            base.apply(self, hb.reducer.reduce(aggregated, variables),
                       variables)
            return None

        def skip_fn():
            return self.iterations.assign_add(1)

        hb.aggregator(grads, variables, apply_fn, skip_fn)
        return None

    return {"apply": apply}


def _mark_reduced(grads: Sequence[Any], runtime: "_Runtime") -> None:
    """Tags the gradients ``get_gradients`` returned as reduced by the
    optimizer whose state is ``runtime``, so that its apply_gradients does
    not reduce them a second time (tf_keras' get_updates, which v1 graph
    mode model.fit calls, passes them straight to apply_gradients)."""
    for grad in grads:
        if grad is not None:
            grad._hb_reduced_by = runtime  # pylint: disable=protected-access


def _reduced_by(grad: Any, runtime: "_Runtime") -> bool:
    """Whether ``grad`` came reduced from the get_gradients of the
    optimizer whose state is ``runtime``."""
    return (grad is not None
            and getattr(grad, "_hb_reduced_by", None) is runtime)


# The keyword with which a tf_keras optimizer family's apply_gradients is
# told that the caller aggregated the gradients, and its value then.
_CALLER_AGGREGATED = {
    _compat.TF_KERAS: ("skip_gradients_aggregation", True),
    _compat.TF_KERAS_LEGACY: ("experimental_aggregate_gradients", False),
}


def _apply_arguments(family: str, args: tuple, kwargs: dict) -> tuple:
    """Splits a tf_keras ``apply_gradients(grads_and_vars, *args,
    **kwargs)`` call.

    Returns:
        (caller_aggregated, kwargs): whether the caller says it aggregated
        the gradients itself (``skip_gradients_aggregation=True``, or the
        legacy ``experimental_aggregate_gradients=False``; a
        LossScaleOptimizer says so after calling this optimizer's
        aggregate_gradients), and the keyword arguments, ``args`` named,
        with that flag set to "aggregated" for the base class (whose own
        aggregation is this optimizer's reduction).
    """
    flag, aggregated = _CALLER_AGGREGATED[family]
    named = dict(kwargs)
    for key, value in zip(("name", flag), args):
        if key in named:
            raise TypeError("apply_gradients() got multiple values for "
                            "argument %r" % key)
        named[key] = value
    caller = (bool(named.get("skip_gradients_aggregation", False))
              or not named.get("experimental_aggregate_gradients", True))
    named.pop("skip_gradients_aggregation", None)
    named.pop("experimental_aggregate_gradients", None)
    named[flag] = aggregated
    return caller, named


def _tf_keras_methods(base: type, family: str) -> dict:
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        hb = self._hb_runtime
        caller_aggregated, kwargs = _apply_arguments(family, args, kwargs)
        pairs = list(grads_and_vars)
        if not pairs or (caller_aggregated and hb.aggregator is None):
            # Aggregated by the caller: through this optimizer's
            # aggregate_gradients (a LossScaleOptimizer, before deciding
            # whether to apply), or by the user's own code (TF's meaning
            # of skip_gradients_aggregation).
            return base.apply_gradients(self, pairs, **kwargs)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        done = [_reduced_by(g, hb) for g in grads]
        if any(done):
            return _hb_apply_reduced(self, grads, variables, done, kwargs)
        if hb.aggregator is None:
            reduced = hb.reducer.reduce(grads, variables)
            return base.apply_gradients(self, list(zip(reduced, variables)),
                                        **kwargs)
        _compat.build_optimizer(self, family, variables)

        def apply_fn(aggregated):
            reduced = hb.reducer.reduce(aggregated, variables)
            pairs_out = [(g, v) for g, v in zip(reduced, variables)
                         if g is not None]
            return base.apply_gradients(self, pairs_out, **kwargs)

        def skip_fn():
            return self.iterations.assign_add(1)

        # Called by a LossScaleOptimizer after aggregate_gradients agreed
        # on its decision: the branch it calls from is rank-uniform.
        with (branch_check.rank_uniform() if caller_aggregated
              else contextlib.nullcontext()):
            hb.aggregator(grads, variables, apply_fn, skip_fn)
        return self.iterations

    def aggregate_gradients(self, grads_and_vars):
        """The gradients reduced over the process set: what a tf_keras
        LossScaleOptimizer holding this optimizer calls before it checks
        them for Inf/NaN, so every rank decides on the same values (it
        then applies with ``skip_gradients_aggregation``).

        With backward_passes_per_step > 1 the gradients come back as
        computed, except that a non-finite value on any rank makes them
        NaN on every rank (hbcore_tf._parallel.non_finite): the loss-scale
        decision is the same everywhere, and apply_gradients aggregates
        and reduces as usual.
        """
        hb = self._hb_runtime
        pairs = list(grads_and_vars)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if hb.aggregator is None:
            grads = hb.reducer.reduce(grads, variables)
        else:
            grads = _loss_scale.agree_non_finite(hb, grads)
        return list(zip(grads, variables))

    def _hb_apply_reduced(self, grads, variables, done, kwargs):
        """apply_gradients of gradients from this optimizer's get_gradients
        (``done``: which ones): those are applied as they are; any others
        are reduced here (not with backward_passes_per_step > 1)."""
        hb = self._hb_runtime
        if hb.aggregator is None:
            pending = [None if d else g for g, d in zip(grads, done)]
            reduced = hb.reducer.reduce(pending, variables)
            out = [g if d else r for g, r, d in zip(grads, reduced, done)]
            return base.apply_gradients(self, list(zip(out, variables)),
                                        **kwargs)
        if not all(d for g, d in zip(grads, done) if g is not None):
            raise ValueError(
                "apply_gradients got gradients from this optimizer's "
                "get_gradients mixed with other gradients; with "
                "backward_passes_per_step > 1 pass only what get_gradients "
                "returned")
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        # Slots must exist before the tf.cond that applies the gradients.
        _compat.build_optimizer(self, family, [v for _, v in pairs])

        def apply_branch():
            applied = base.apply_gradients(self, pairs, **kwargs)
            with tf.control_dependencies(_local_aggregation_deps(applied)):
                return tf.constant(True)

        def skip_branch():
            step = self.iterations.assign_add(1)
            with tf.control_dependencies(_local_aggregation_deps(step)):
                return tf.constant(False)

        update = hb.aggregator.is_update_pass([g for g, _ in pairs])
        applied = tf.cond(update, apply_branch, skip_branch)
        if tf.executing_eagerly():
            return self.iterations
        return applied.op

    def get_gradients(self, loss, params):
        """The gradients of ``loss`` for ``params``, reduced over the
        process set (as Horovod's get_gradients; tf_keras' legacy
        optimizers, v1 graph mode or a tf.function).

        With backward_passes_per_step = N > 1: the gradients are added to
        local accumulators; every N-th call returns the reduced aggregate,
        the other calls this pass's local gradients (apply_gradients then
        only advances ``iterations``).
        """
        hb = self._hb_runtime
        grads = list(base.get_gradients(self, loss, params))
        variables = tf.nest.flatten(params)
        if hb.aggregator is None:
            reduced = hb.reducer.reduce(grads, variables)
        else:
            reduced = hb.aggregator.accumulate_and_reduce(
                grads, variables,
                lambda aggregated: hb.reducer.reduce(aggregated, variables))
        _mark_reduced(reduced, hb)
        return reduced

    methods = {"apply_gradients": apply_gradients,
               "_hb_apply_reduced": _hb_apply_reduced,
               # The hook a tf_keras LossScaleOptimizer calls on the
               # optimizer it holds (current and legacy names).
               ("aggregate_gradients" if family == _compat.TF_KERAS
                else "_aggregate_gradients"): aggregate_gradients}
    if hasattr(base, "get_gradients"):
        methods["get_gradients"] = get_gradients
    return methods


def _register_local_var(self, var: Any) -> None:
    """Registers ``var`` as local to this rank: its gradient is not
    allreduced (e.g. a model-parallel layer) and is divided by size() when
    scale_local_gradients is set."""
    self._hb_runtime.reducer.register_local(var)


def distributed_keras_class(base: type, settings: _Settings,
                            family: Optional[str] = None) -> type:
    """Returns a subclass of the Keras optimizer class ``base`` that
    allreduces gradients, named and placed like ``base``.

    Args:
        base: a Keras 3 or tf_keras optimizer class.
        settings: the DistributedOptimizer arguments.
        family: the optimizer family (detected from the class when None).
    """
    if getattr(base, "_hb_distributed", False):
        base = base.__mro__[1]
    if family is None:
        family = _compat.optimizer_class_family(base)
    if family == _compat.KERAS3:
        # The moment: the first Keras 3 DistributedOptimizer class; models
        # using it compile without XLA, and a LossScaleOptimizer holding
        # it decides on reduced gradients.
        _keras_xla.install()
        _loss_scale.install()
    methods = (_keras3_methods(base) if family == _compat.KERAS3
               else _tf_keras_methods(base, family))

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self._hb_runtime = _Runtime(settings, "Distributed" + base.__name__)

    namespace = dict(methods)
    namespace.update({
        "__init__": __init__,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
        "_hb_distributed": True,
        "_hb_settings": settings,
        "register_local_var": _register_local_var,
    })
    return type(base.__name__, (base,), namespace)


def _wrap_keras(optimizer: Any, family: str, settings: _Settings) -> Any:
    cls = distributed_keras_class(type(optimizer), settings, family)
    return cls.from_config(optimizer.get_config())


# --- tf.compat.v1 --------------------------------------------------------------------

class _DistributedV1Optimizer(tf.compat.v1.train.Optimizer):
    """Wraps a tf.compat.v1.train.Optimizer: compute_gradients allreduces,
    apply_gradients delegates (slot names unchanged)."""

    def __init__(self, optimizer: Any, settings: _Settings,
                 use_locking: bool) -> None:
        name = settings.name or "Distributed" + type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._hb_runtime = _Runtime(settings, name)
        # Graphs (None: eager / tf.function) in which compute_gradients
        # aggregated: apply_gradients there applies what it returned.
        self._hb_aggregated_in: set = set()

    def compute_gradients(self, *args: Any, **kwargs: Any) -> List[tuple]:
        """Computes gradients with the wrapped optimizer and allreduces them.

        With backward_passes_per_step = N > 1 (as Horovod's
        LocalGradientAggregationHelper): the gradients are added to local
        accumulators; every N-th call returns the allreduced aggregate
        (divided by N with average_aggregated_gradients), the other calls
        this pass's local gradients, which apply_gradients then ignores.
        """
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        hb = self._hb_runtime
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if hb.aggregator is not None:
            reduced = hb.aggregator.accumulate_and_reduce(
                grads, variables,
                lambda aggregated: hb.reducer.reduce(aggregated, variables))
            self._hb_aggregated_in.add(hb.aggregator.graph_key())
            return list(zip(reduced, variables))
        reduced = hb.reducer.reduce(grads, variables)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars: Sequence[tuple],
                        global_step: Any = None, name: Optional[str] = None
                        ) -> Any:
        """Applies gradients with the wrapped optimizer (with
        backward_passes_per_step > 1: on update passes only; global_step
        advances on every call).

        After this optimizer's compute_gradients (minimize, or compute,
        transform, apply: as Horovod) it applies the gradients given on
        the passes where compute_gradients returned the reduced aggregate.
        Gradients computed elsewhere are aggregated and reduced here.
        """
        hb = self._hb_runtime
        if hb.aggregator is None:
            return self._optimizer.apply_gradients(grads_and_vars,
                                                   global_step=global_step,
                                                   name=name)
        pairs = [(g, v) for g, v in grads_and_vars]
        variables = [v for _, v in pairs]
        # Slots must exist before the tf.cond that applies the gradients.
        _compat.build_optimizer(self._optimizer, _compat.V1,
                                [v for g, v in pairs if g is not None])
        if hb.aggregator.graph_key() in self._hb_aggregated_in:
            return self._apply_computed(pairs, global_step, name)

        def apply_fn(aggregated):
            reduced = hb.reducer.reduce(aggregated, variables)
            return self._optimizer.apply_gradients(
                [(g, v) for g, v in zip(reduced, variables) if g is not None],
                global_step=global_step, name=name)

        def skip_fn():
            if global_step is None:
                return None
            return tf.compat.v1.assign_add(global_step, 1)

        applied = hb.aggregator([g for g, _ in pairs], variables, apply_fn,
                                skip_fn)
        if tf.executing_eagerly():
            return None
        return applied.op

    def _apply_computed(self, pairs: List[tuple], global_step: Any,
                        name: Optional[str]) -> Any:
        """apply_gradients after compute_gradients aggregated: applies
        ``pairs`` when the pass was an update pass, else only advances
        global_step."""
        hb = self._hb_runtime

        def apply_branch():
            applied = self._optimizer.apply_gradients(
                pairs, global_step=global_step, name=name)
            with tf.control_dependencies(_local_aggregation_deps(applied)):
                return tf.constant(True)

        def skip_branch():
            step = (None if global_step is None
                    else tf.compat.v1.assign_add(global_step, 1))
            with tf.control_dependencies(_local_aggregation_deps(step)):
                return tf.constant(False)

        update = hb.aggregator.is_update_pass([g for g, _ in pairs])
        applied = tf.cond(update, apply_branch, skip_branch)
        if tf.executing_eagerly():
            return None
        return applied.op

    def register_local_var(self, var: Any) -> None:
        """Registers ``var`` as local: its gradient is not allreduced (and
        is divided by size() when scale_local_gradients is set)."""
        self._hb_runtime.reducer.register_local(var)

    def get_slot(self, *args: Any, **kwargs: Any) -> Any:
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> List[str]:
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> List[Any]:
        return self._optimizer.variables(*args, **kwargs)


# --- the public factory ------------------------------------------------------------------

def DistributedOptimizer(optimizer: Any, name: Optional[str] = None,
                         use_locking: bool = False, device_dense: str = "",
                         device_sparse: str = "",
                         compression: Any = Compression.none,
                         sparse_as_dense: bool = False,
                         backward_passes_per_step: int = 1,
                         op: Any = Average,
                         gradient_predivide_factor: float = 1.0,
                         average_aggregated_gradients: bool = False,
                         num_groups: int = 0, groups: Any = None,
                         process_set: Any = process_sets.global_process_set,
                         scale_local_gradients: bool = True,
                         bucket_cap_mb: Optional[float] = None) -> Any:
    """Wraps an optimizer so that it averages gradients over all ranks
    before applying them.

    Works with Keras 3 optimizers, tf_keras optimizers (current and legacy,
    ``TF_USE_LEGACY_KERAS=1``) and ``tf.compat.v1.train.Optimizer``. Keras
    optimizers come back as an instance of a subclass with the same class
    name, so saved models load without hbcore.

    Args:
        optimizer: the optimizer to wrap.
        name: prefix of the allreduce ops' names (default
            "Distributed" + class name); for v1 also the wrapper's name.
        use_locking: v1 only: passed to tf.compat.v1.train.Optimizer.
        device_dense: device for dense gradient allreduces (default: the
            op's placement).
        device_sparse: device for sparse (IndexedSlices) gradient
            allreduces.
        compression: Compression.none or Compression.fp16 (halves the
            bytes on the wire for float32 gradients).
        sparse_as_dense: convert IndexedSlices gradients to dense tensors
            before reducing (better for embeddings updated on most rows).
        backward_passes_per_step: gradients of this many passes are summed
            locally and reduced once; the optimizer updates every N-th call.
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, divide gradients by this
            before the sum and by size/factor after it.
        average_aggregated_gradients: with backward_passes_per_step > 1,
            divide the locally summed gradients by N.
        num_groups: deprecated (DeprecationWarning): ``groups`` as an
            integer, used only when ``groups`` is None (as Horovod).
        groups: None (one fused collective per step, the default), a
            positive integer k (k collectives over consecutive gradients),
            or a list of lists of variables (one collective per list; other
            variables one each).
        process_set: the ranks gradients are reduced over (default: all).
        scale_local_gradients: divide gradients of variables registered
            with ``register_local_var`` by size() (with any op, as Horovod).
        bucket_cap_mb: SageMaker alias: the fusion threshold in MiB when
            given before hvd.init(); after init, gradient buckets of at
            most that size, one fused collective each, in reverse variable
            order (see apply_bucket_cap_mb).

    Returns:
        The distributed optimizer.

    Raises:
        ValueError: an unsupported optimizer type or invalid argument
            (e.g. an integer ``groups`` <= 0, as Horovod).
        NotImplementedError: op=Adasum.

    Warns:
        DeprecationWarning: ``num_groups`` is not 0 (use ``groups``).
    """
    family = _compat.optimizer_family(optimizer)
    # As Horovod: num_groups warns and stands for groups only when groups
    # is None; an integer groups must be positive.
    groups = resolve_groups(num_groups, groups, stacklevel=3)
    settings = _Settings(name, compression, sparse_as_dense,
                         backward_passes_per_step, op,
                         gradient_predivide_factor,
                         average_aggregated_gradients, groups,
                         device_dense, device_sparse, process_set,
                         scale_local_gradients)
    # Validate the reduction arguments now, not at the first step.
    settings.reducer("validation")
    if bucket_cap_mb is not None:
        # Last: before init it defers a setting to the next init(), which
        # a call that fails on another argument must not leave behind.
        settings.bucket_bytes = apply_bucket_cap_mb(
            bucket_cap_mb, bucketed=groups is None)
    if family == _compat.V1:
        return _DistributedV1Optimizer(optimizer, settings, use_locking)
    return _wrap_keras(optimizer, family, settings)
