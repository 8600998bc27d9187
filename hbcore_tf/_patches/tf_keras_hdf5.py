"""Patches tf_keras's legacy HDF5 format (tf_keras.src.saving.legacy.
hdf5_format: ``save_subset_weights_to_hdf5_group``,
``save_optimizer_weights_to_hdf5_group``, ``preprocess_weights_for_loading``)
and the optimizers' ``set_weights`` (``Optimizer``, legacy
``OptimizerV2``) that ``load_model`` restores an optimizer with.

Why: tf_keras writes and reads ``.h5``/``.hdf5`` files through that
module, which reads and sets variables directly instead of going through
the layers' ``save_own_variables``: left alone, it would store each rank's
rows of a sharded table as if they were the table. The Keras layer passes
the behaviour (hbcore_tf.keras.legacy_h5): the value stored for a sharded
variable (``whole_value``), and the value a sharded variable is set from
(``local_value``: a whole table cut to this rank's rows). Variables for
which ``is_sharded`` is False are stored and loaded as tf_keras does.

Installed: with the tf_keras ``Model.save`` patch, by the first sharded
tf_keras ShardedEmbedding that is built. Undone: never in training (the
model outlives any scope); ``uninstall`` is for tests.

Checked on: tf_keras 2.16.0 (TensorFlow 2.16.2) and tf_keras 2.21.0
(TensorFlow 2.21.0) (internals.TF_KERAS_HDF5_*, TF_KERAS_*SET_WEIGHTS).
"""
import functools
from typing import Any, Callable, List, Sequence

from hbcore_tf._patches import internals, patch

_SUBSET = patch.of(internals.TF_KERAS_HDF5_SAVE_SUBSET)
_OPTIMIZER = patch.of(internals.TF_KERAS_HDF5_SAVE_OPTIMIZER)
_PREPROCESS = patch.of(internals.TF_KERAS_HDF5_PREPROCESS)
_SET_WEIGHTS = patch.of(internals.TF_KERAS_SET_WEIGHTS)
_V2_SET_WEIGHTS = patch.of(internals.TF_KERAS_V2_SET_WEIGHTS)
_ALL = (_SUBSET, _OPTIMIZER, _PREPROCESS, _SET_WEIGHTS, _V2_SET_WEIGHTS)


def _write_values(group: Any, names: List[bytes],
                  values: Sequence[Any]) -> None:
    """What tf_keras writes for a list of weights: the names attribute and
    one dataset per weight."""
    internals.TF_KERAS_HDF5_SAVE_ATTRIBUTES.load()(group, "weight_names",
                                                   names)
    for name, value in zip(names, values):
        dataset = group.create_dataset(name, value.shape, dtype=value.dtype)
        if not value.shape:
            dataset[()] = value
        else:
            dataset[:] = value


def install(is_sharded: Callable[[Any], bool],
            whole_value: Callable[[Any], Any],
            local_value: Callable[[Any, Any], Any]) -> None:
    """Installs every patch of this module (idempotent).

    Args:
        is_sharded: whether a variable is a shard (of a table or slot).
        whole_value: the value to store for a sharded variable (collective:
            every rank runs the save).
        local_value: ``local_value(variable, value)``, the value to assign
            to ``variable`` from ``value`` read from a file.
    """
    optimizer_class = internals.TF_KERAS_OPTIMIZER.load()

    def make_subset(plain: Callable) -> Callable:
        @functools.wraps(plain)
        def save_subset_weights_to_hdf5_group(f, weights):
            if not any(is_sharded(w) for w in weights):
                return plain(f, weights)
            _write_values(f, [w.name.encode("utf8") for w in weights],
                          [whole_value(w) for w in weights])
        return save_subset_weights_to_hdf5_group

    def make_optimizer(plain: Callable) -> Callable:
        @functools.wraps(plain)
        def save_optimizer_weights_to_hdf5_group(hdf5_group, optimizer):
            if isinstance(optimizer, optimizer_class):
                weights = optimizer.variables
            else:
                weights = optimizer.weights
            if not any(is_sharded(w) for w in weights):
                return plain(hdf5_group, optimizer)
            _write_values(hdf5_group.create_group("optimizer_weights"),
                          [str(w.name).encode("utf8") for w in weights],
                          [whole_value(w) for w in weights])
        return save_optimizer_weights_to_hdf5_group

    def make_preprocess(plain: Callable) -> Callable:
        @functools.wraps(plain)
        def preprocess_weights_for_loading(layer, weights, *args, **kwargs):
            weights = plain(layer, weights, *args, **kwargs)
            variables = internals.TF_KERAS_HDF5_LEGACY_WEIGHTS.load()(layer)
            if len(variables) != len(weights):
                return weights  # tf_keras reports the mismatch
            return [local_value(v, w) for v, w in zip(variables, weights)]
        return preprocess_weights_for_loading

    def make_set_weights(variables_of: Callable[[Any], List[Any]]
                         ) -> Callable:
        def make(plain: Callable) -> Callable:
            @functools.wraps(plain)
            def set_weights(self, weights):
                weights = list(weights)
                variables = variables_of(self)
                if len(variables) == len(weights):
                    weights = [local_value(v, w)
                               for v, w in zip(variables, weights)]
                return plain(self, weights)
            return set_weights
        return make

    _SUBSET.install(make_subset)
    _OPTIMIZER.install(make_optimizer)
    _PREPROCESS.install(make_preprocess)
    _SET_WEIGHTS.install(make_set_weights(
        lambda o: list(o._variables)))  # noqa: SLF001
    _V2_SET_WEIGHTS.install(make_set_weights(lambda o: list(o.weights)))


def uninstall() -> None:
    """Restores tf_keras's functions and methods."""
    for one in _ALL:
        one.uninstall()


def installed() -> bool:
    """Whether the patches are in place."""
    return _SUBSET.installed
