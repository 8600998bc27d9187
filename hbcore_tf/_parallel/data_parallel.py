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
- Keras saving (``make_saving_collective``, applied to the flavour's
  Model class, in or outside hb.scope): for a model holding sharded
  embedding tables (hb.keras.layers.ShardedEmbedding), ``save_weights``
  and ``save`` are collective (every rank calls them: the tables are
  allgathered) and only rank 0 writes the file; the other ranks write to
  a temporary file they delete.

Every reduction uses ``BucketReducer``: ``grad_nbuckets`` fused
grouped_allreduce calls per step, over the gradients in REVERSE variable
order (the last layers' gradients are computed first in backprop, so the
first group is ready first; PyTorch DDP builds its buckets the same way).
The plan depends only on the variable list, so every rank issues the same
collectives.
"""
import contextlib
import functools
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import numpy as np

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.options import options
from hbcore_tf._base.rank_local import is_sharded
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
    hvd.DistributedOptimizer's v1 wrapper).

    Raises:
        ValueError: not an optimizer of a supported family.
    """
    cls = type(obj)
    if getattr(cls, "_hb_distributed", False) or isinstance(
            obj, hvd_optimizers._DistributedV1Optimizer):
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


def has_sharded_weights(model: Any) -> bool:
    """Whether a Keras model holds a sharded embedding table's shard."""
    try:
        weights = list(model.weights)
    except ValueError:  # tf_keras: weights not created yet
        return False
    return any(is_sharded(w) for w in weights)


# The Keras file formats that save a layer through its own
# save_own_variables (Keras 3's saving_lib, also tf_keras'), and tf_keras's
# legacy HDF5 files, whose writer hbcore_tf.keras.legacy_h5 makes store
# whole tables; the others (a tf_keras SavedModel) read weights directly
# and would store one rank's rows.
_COLLECTIVE_FORMATS = (".weights.h5", ".keras")
_TF_KERAS_LEGACY_H5 = (".h5", ".hdf5")
# The suffixes tf_keras does not write as a TensorFlow checkpoint
# (saving_utils.is_hdf5_filepath): save_weights to any other path,
# save_format None or "tf", writes one.
_TF_KERAS_H5_SUFFIXES = _TF_KERAS_LEGACY_H5 + (".keras",)


def writes_tf_checkpoint(filepath: Any, save_format: Any) -> bool:
    """Whether tf_keras's ``save_weights(filepath, save_format=...)``
    writes a TensorFlow checkpoint (tf_keras's own rule)."""
    if save_format is not None:
        return str(save_format).lower().strip() in ("tf", "tensorflow")
    return not os.fspath(filepath).endswith(_TF_KERAS_H5_SUFFIXES)


@contextlib.contextmanager
def rank_zero_writes(model: Any, filepath: Any, what: str,
                     tf_keras: bool = False) -> Iterator[Any]:
    """The path a rank saves ``model`` to: ``filepath`` on rank 0 and for
    models without sharded tables; for a model with sharded tables on
    other ranks, a file of the same name in a temporary directory removed
    afterwards (their save still runs: assembling the tables is
    collective). All ranks leave together (a barrier after rank 0 closed
    the file), so any rank may read the file next.

    Args:
        model: the model saved.
        filepath: where the caller saves it.
        what: the method's name, for messages.
        tf_keras: the model is tf_keras's (legacy .h5 files are then
            collective too).

    Raises:
        NotImplementedError: a model with sharded tables saved in a format
            that would store one rank's rows (a tf_keras SavedModel; with
            Keras 3 any other suffix).
    """
    if not has_sharded_weights(model):
        yield filepath
        return
    name = os.path.basename(os.fspath(filepath))
    formats = _COLLECTIVE_FORMATS + (_TF_KERAS_LEGACY_H5 if tf_keras else ())
    if not name.endswith(formats):
        raise NotImplementedError(
            "%s(%r): a model with sharded embedding tables saves to "
            ".weights.h5 (save_weights) or .keras (save) files, or with "
            "tf_keras to .h5 files or a TensorFlow checkpoint (save_weights "
            "to a path without .h5); the other formats would store one "
            "rank's rows of each table. Export a serving model with "
            "hb.keras.layers.export_plain_model." % (what, name))
    import hbcore

    tmp = None if hbcore.rank() == 0 else tempfile.mkdtemp(prefix="hb_save_")
    try:
        yield filepath if tmp is None else os.path.join(tmp, name)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    hbcore.barrier()


_collective_saving: set = set()


def make_saving_collective(model_base: type, tf_keras: bool) -> None:
    """Wraps ``model_base.save`` and ``save_weights`` (once per class) in
    ``rank_zero_writes``: a model holding sharded tables is saved
    collectively, every rank calling, rank 0 alone writing the file; other
    models save exactly as before. Done for the Keras flavour's Model class
    when its ShardedEmbedding class is made, so models built outside
    hb.scope() are covered too: before, each of their ranks wrote the same
    file at once.

    tf_keras's TensorFlow checkpoint format (``save_weights`` to a path
    without an HDF5 suffix) is passed through unchanged on every rank: it
    is written by tf.train.Checkpoint, whose save is already collective for
    sharded tables (hbcore_tf.embedding.saving: rank 0 writes, the other
    ranks' rows are merged in), and read back slice by slice at any world
    size by ``load_weights``.

    Args:
        model_base: ``keras.Model`` of Keras 3 or of tf_keras.
        tf_keras: whether ``model_base`` is tf_keras's.
    """
    if model_base in _collective_saving:
        return
    _collective_saving.add(model_base)
    if tf_keras:
        from hbcore_tf.keras import legacy_h5

        legacy_h5.install()
    plain_save, plain_save_weights = model_base.save, model_base.save_weights

    @functools.wraps(plain_save)
    def save(self, filepath, *args, **kwargs):
        with rank_zero_writes(self, filepath, "save", tf_keras) as path:
            return plain_save(self, path, *args, **kwargs)

    @functools.wraps(plain_save_weights)
    def save_weights(self, filepath, *args, **kwargs):
        save_format = kwargs.get("save_format",
                                 args[1] if len(args) > 1 else None)
        if tf_keras and writes_tf_checkpoint(filepath, save_format):
            return plain_save_weights(self, filepath, *args, **kwargs)
        with rank_zero_writes(self, filepath, "save_weights",
                              tf_keras) as path:
            return plain_save_weights(self, path, *args, **kwargs)

    model_base.save = save
    model_base.save_weights = save_weights


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
