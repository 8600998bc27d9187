"""tf_keras's legacy HDF5 files with sharded tables: ``save_weights`` and
``save`` to ``.h5``/``.hdf5``, ``load_weights``, ``load_model``.

Those files are written and read by tf_keras's ``hdf5_format`` module,
which reads and sets variables directly instead of going through the
layers' ``save_own_variables``: left alone, it would store each rank's
rows as if they were the table. ``install`` wraps, once, the module's
functions that touch variable values, and the optimizers' ``set_weights``
that ``load_model`` restores the optimizer with:

- saving: the value stored for a sharded table or optimizer slot is the
  whole ``[input_dim, output_dim]`` tensor in id order (allgathered, so
  every rank runs the save:
  ``hbcore_tf._parallel.data_parallel.rank_zero_writes`` gives ranks > 0 a
  temporary file and lets rank 0 alone write the real one);
  other variables are stored as tf_keras stores them. The file is the one
  a plain ``keras.layers.Embedding`` model writes, so it loads into one in
  one process, and the other way round.
- loading: a whole table (or slot) read for a sharded variable is cut to
  this rank's rows before it is assigned, at any world size.

The allgathers run in the order the file lists weights, which tf_keras
derives from the layers' names and the model's structure: the same on
every rank for the same model (give layers explicit names when ranks may
create different numbers of layers, as for the other formats).
"""
from typing import Any, List, Sequence

import numpy as np

from hbcore_tf._base.rank_local import shard_info, whole_value

_installed = False


def _local_value(variable: Any, value: Any) -> Any:
    """``value`` for ``variable``: this rank's rows when ``variable`` is
    a sharded table or slot and ``value`` is the whole table."""
    info = shard_info(variable)
    shape = tuple(getattr(value, "shape", ()))
    if (info is None or info.rows == info.num_rows or not shape
            or shape[0] != info.num_rows
            or tuple(variable.shape)[:1] != (info.rows,)):
        return value
    return np.asarray(value[info.offset:info.offset + info.rows])


def _write_values(group: Any, names: List[bytes], values: Sequence[Any],
                  save_attributes: Any) -> None:
    """What tf_keras writes for a list of weights: the names attribute and
    one dataset per weight."""
    save_attributes(group, "weight_names", names)
    for name, value in zip(names, values):
        dataset = group.create_dataset(name, value.shape, dtype=value.dtype)
        if not value.shape:
            dataset[()] = value
        else:
            dataset[:] = value


def install() -> None:
    """Wraps tf_keras's HDF5 saving and the optimizers' ``set_weights``
    (idempotent; see the module docstring). Models without sharded tables
    save and load exactly as before."""
    global _installed
    if _installed:
        return
    _installed = True
    from tf_keras.src.optimizers import optimizer as optimizer_module
    from tf_keras.src.optimizers.legacy import optimizer_v2
    from tf_keras.src.saving.legacy import hdf5_format

    plain_subset = hdf5_format.save_subset_weights_to_hdf5_group
    plain_optimizer = hdf5_format.save_optimizer_weights_to_hdf5_group
    plain_preprocess = hdf5_format.preprocess_weights_for_loading

    def save_subset_weights_to_hdf5_group(f, weights):
        if not any(shard_info(w) is not None for w in weights):
            return plain_subset(f, weights)
        _write_values(f, [w.name.encode("utf8") for w in weights],
                      [whole_value(w) for w in weights],
                      hdf5_format.save_attributes_to_hdf5_group)

    def save_optimizer_weights_to_hdf5_group(hdf5_group, optimizer):
        if isinstance(optimizer, optimizer_module.Optimizer):
            weights = optimizer.variables
        else:
            weights = optimizer.weights
        if not any(shard_info(w) is not None for w in weights):
            return plain_optimizer(hdf5_group, optimizer)
        _write_values(hdf5_group.create_group("optimizer_weights"),
                      [str(w.name).encode("utf8") for w in weights],
                      [whole_value(w) for w in weights],
                      hdf5_format.save_attributes_to_hdf5_group)

    def preprocess_weights_for_loading(layer, weights, *args, **kwargs):
        weights = plain_preprocess(layer, weights, *args, **kwargs)
        variables = hdf5_format._legacy_weights(layer)  # noqa: SLF001
        if len(variables) != len(weights):
            return weights  # tf_keras reports the mismatch
        return [_local_value(v, w) for v, w in zip(variables, weights)]

    hdf5_format.save_subset_weights_to_hdf5_group = \
        save_subset_weights_to_hdf5_group
    hdf5_format.save_optimizer_weights_to_hdf5_group = \
        save_optimizer_weights_to_hdf5_group
    hdf5_format.preprocess_weights_for_loading = preprocess_weights_for_loading

    for cls, variables_of in (
            (optimizer_module.Optimizer, lambda o: list(o._variables)),  # noqa: SLF001
            (optimizer_v2.OptimizerV2, lambda o: list(o.weights))):
        _wrap_set_weights(cls, variables_of)


def _wrap_set_weights(cls: type, variables_of: Any) -> None:
    plain = cls.set_weights

    def set_weights(self, weights):
        weights = list(weights)
        variables = variables_of(self)
        if len(variables) == len(weights):
            weights = [_local_value(v, w) for v, w in zip(variables, weights)]
        return plain(self, weights)

    set_weights.__doc__ = plain.__doc__
    cls.set_weights = set_weights
