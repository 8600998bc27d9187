"""DistributedGradientTape and PartialDistributedGradientTape.

``hvd.DistributedGradientTape(tape)`` returns a tape of a subclass of the
wrapped tape's own class (same name) sharing the wrapped tape's state, whose
``gradient()`` allreduces what the wrapped tape computes: all gradients of
the call in one grouped_allreduce (see
hbcore_tf._parallel.gradient_reduction), in
eager code and inside tf.function alike.

    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
"""
from typing import Any, Dict, List, Tuple

import tensorflow as tf

from hbcore_tf import process_sets
from hbcore_tf._base import compat as _compat
from hbcore_tf._parallel.gradient_reduction import (GradientReducer,
                                                    resolve_groups)
from hbcore_tf.compression import Compression
from hbcore_tf.mpi_ops import Average


class _DistributedTapeMixin:
    """gradient() = the wrapped class's gradient(), then an allreduce."""

    _hb_reducer: GradientReducer

    @tf.autograph.experimental.do_not_convert  # plain Python
    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 use_generic_names: bool = False,
                 unconnected_gradients: Any = tf.UnconnectedGradients.NONE
                 ) -> Any:
        """Computes gradients like tf.GradientTape.gradient and averages
        them over all ranks; gradients of local sources are not reduced
        (divided by size() when scale_local_gradients).

        Args:
            target, sources, output_gradients, unconnected_gradients: as in
                tf.GradientTape.gradient.
            use_generic_names: accepted for Horovod compatibility (its
                positional place is Horovod's). hbcore's collective names
                never depend on tensor names, so it changes nothing.

        Returns:
            The reduced gradients, in the structure of ``sources``.
        """
        del use_generic_names  # names are rank-independent already
        grads = super().gradient(target, sources, output_gradients,
                                 unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads)
        reduced = self._hb_reducer.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced)

    @tf.autograph.experimental.do_not_convert  # plain Python
    def get_local_and_global_gradients(
            self, target: Any, sources: Any, output_gradients: Any = None,
            use_generic_names: bool = False) -> Tuple[List[Tuple[Any, Any]],
                                                      List[Tuple[Any, Any]]]:
        """Horovod's split of :meth:`gradient`'s result by locality.

        Args:
            target, sources, output_gradients, use_generic_names: as in
                :meth:`gradient` (``sources`` may be nested).

        Returns:
            (local, global): lists of (source, gradient) pairs in the
            order of the flattened ``sources``; local pairs are those of
            sources registered as local (``local_layers`` or
            ``register_local_source``), their gradients not allreduced
            (divided by size() when scale_local_gradients), as in
            :meth:`gradient`; the others' gradients are the reduced ones.
        """
        grads = tf.nest.flatten(self.gradient(
            target, sources, output_gradients, use_generic_names))
        local: List[Tuple[Any, Any]] = []
        shared: List[Tuple[Any, Any]] = []
        for source, grad in zip(tf.nest.flatten(sources), grads):
            is_local = self._hb_reducer.is_local(source)
            (local if is_local else shared).append((source, grad))
        return local, shared

    def register_local_source(self, source: Any) -> None:
        """Registers ``source`` (a variable) as local to this rank: its
        gradient is not allreduced (e.g. a model-parallel layer) and is
        divided by size() when scale_local_gradients is set."""
        self._hb_reducer.register_local(source)


_TAPE_CLASSES: Dict[type, type] = {}

# The eager reductions (tf.functions by plan, see GradientReducer), shared by
# every tape wrapped with the same reduction arguments: the idiomatic loop
# wraps a new tape each step, and a reducer of its own would trace its
# tf.function again every step (a new graph, new collective names) instead
# of once per gradient signature.
_EAGER_FNS: Dict[Tuple[Any, ...], Dict[Any, Any]] = {}


def _share_eager_fns(reducer: GradientReducer, key: Tuple[Any, ...]) -> None:
    """Gives ``reducer`` the eager-function cache of earlier reducers built
    with the same arguments (``key``). What those functions read of the
    reducer that traced them (name, compression, op, scale factors,
    devices, process set) is all in ``key``; local sources are handled
    before the reduction, per tape. An unhashable argument (a custom
    compressor) leaves the reducer its own cache."""
    try:
        hash(key)
    except TypeError:
        return
    reducer._eager_fns = _EAGER_FNS.setdefault(key, {})  # noqa: SLF001


def _tape_class(base: type) -> type:
    if issubclass(base, _DistributedTapeMixin):
        return base
    cls = _TAPE_CLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (_DistributedTapeMixin, base),
                   {"__module__": base.__module__,
                    "__qualname__": base.__qualname__,
                    "__doc__": base.__doc__})
        _TAPE_CLASSES[base] = cls
    return cls


def _wrap(gradtape: Any, reducer: GradientReducer) -> Any:
    if not isinstance(gradtape, tf.GradientTape):
        raise ValueError("DistributedGradientTape wraps a tf.GradientTape, got "
                         "%s" % type(gradtape).__name__)
    cls = _tape_class(type(gradtape))
    tape = cls.__new__(cls)
    # Share the wrapped tape's state, so wrapping inside or after the `with`
    # block behaves the same and the original object stays consistent.
    object.__setattr__(tape, "__dict__", gradtape.__dict__)
    tape._hb_reducer = reducer
    return tape


def DistributedGradientTape(gradtape: tf.GradientTape, device_dense: str = "",
                            device_sparse: str = "",
                            compression: Any = Compression.none,
                            sparse_as_dense: bool = False, op: Any = Average,
                            gradient_predivide_factor: float = 1.0,
                            num_groups: int = 0, groups: Any = None,
                            process_set: Any = process_sets.global_process_set,
                            scale_local_gradients: bool = True
                            ) -> tf.GradientTape:
    """Wraps a tf.GradientTape so that ``gradient()`` returns gradients
    averaged over all ranks.

    Args:
        gradtape: the tape (typically after its ``with`` block).
        device_dense: device for dense gradient allreduces.
        device_sparse: device for sparse (IndexedSlices) gradient allreduces.
        compression: Compression.none or Compression.fp16.
        sparse_as_dense: convert IndexedSlices gradients to dense first.
        op: Average (default) or Sum.
        gradient_predivide_factor: with Average, divide gradients by this
            before the sum and by size/factor after it.
        num_groups: deprecated (DeprecationWarning): ``groups`` as an
            integer, used only when ``groups`` is None (as Horovod).
        groups: None (one fused collective per gradient() call), a
            positive integer k, or a list of lists of variables (one
            collective per list).
        process_set: the ranks gradients are reduced over (default: all).
        scale_local_gradients: divide gradients of local sources (see
            ``register_local_source``) by size().

    Returns:
        A tape of a subclass of ``type(gradtape)`` (same name) sharing its
        state.

    Raises:
        ValueError: not a tf.GradientTape, invalid reduction arguments
            (an integer ``groups`` <= 0 included, as Horovod), or a process
            set that is not registered.
        NotImplementedError: op=Adasum.

    Warns:
        DeprecationWarning: ``num_groups`` is not 0 (use ``groups``).
    """
    # As Horovod's tape: num_groups warns and stands for groups only when
    # groups is None; an integer groups must be positive.
    groups = resolve_groups(num_groups, groups, stacklevel=3)
    reducer = GradientReducer(
        "DistributedGradientTape", compression=compression,
        sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        groups=groups, device_dense=device_dense,
        device_sparse=device_sparse, process_set=process_set,
        scale_local_gradients=scale_local_gradients)
    _share_eager_fns(reducer, (
        reducer.name, compression, sparse_as_dense, reducer.op,
        reducer.prescale, reducer.postscale, device_dense, device_sparse,
        process_sets.process_set_id(process_set), id(process_set)))
    return _wrap(gradtape, reducer)


def PartialDistributedGradientTape(gradtape: tf.GradientTape,
                                   device_dense: str = "",
                                   device_sparse: str = "",
                                   compression: Any = Compression.none,
                                   sparse_as_dense: bool = False,
                                   op: Any = Average,
                                   gradient_predivide_factor: float = 1.0,
                                   num_groups: int = 0, groups: Any = None,
                                   process_set: Any =
                                   process_sets.global_process_set,
                                   local_layers: Any = None,
                                   scale_local_gradients: bool = True
                                   ) -> tf.GradientTape:
    """Like DistributedGradientTape, but the gradients of ``local_layers``'
    trainable variables are not allreduced (model-parallel layers whose
    weights differ per rank). Arguments in Horovod 0.28's order.

    Args:
        gradtape: the tape to wrap.
        local_layers: None, a Keras layer, or a collection of Keras layers
            (Keras 3 or tf_keras) whose gradients stay local.
        scale_local_gradients: divide the local gradients by size() (their
            loss is one rank's share of the global loss).
        (others as in DistributedGradientTape)

    Returns:
        The wrapped tape; more local variables can be added with
        ``register_local_source``.

    Raises:
        ValueError: local_layers holds something that is not a Keras layer
            (Horovod's message), or as DistributedGradientTape.
        NotImplementedError: as DistributedGradientTape.
    """
    local_vars = _compat.local_layer_variables(local_layers)
    # Resolved here, so that num_groups' warning names this caller.
    groups = resolve_groups(num_groups, groups, stacklevel=3)
    tape = DistributedGradientTape(
        gradtape, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients)
    for variable in local_vars:
        tape.register_local_source(variable)
    return tape
