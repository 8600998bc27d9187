"""An optimizer's state in Keras' ``.keras`` and ``.weights.h5`` files when
it has slots of sharded embedding tables (``save_state`` and
``load_state`` replace the optimizers' ``save_own_variables`` and
``load_own_variables``: hbcore_tf._patches.keras_model_save, installed by
hbcore_tf.keras.model_saving).

Keras stores optimizer variable ``i`` as ``store["i"]``, by value. With
sharded tables each rank holds only its rows of a table's slot, so:

- saving (collective: every rank runs it, rank 0 alone writes the file,
  hbcore_tf.keras.model_saving): a fixed table's slot is stored whole,
  ``[input_dim, output_dim]`` in id order (allgathered); a dynamic table's
  slot as its rows in key order, ``[N, dim]``, with the keys as
  ``store["i-keys"]`` (int64 ``[N]``, ascending: the table's keys). Other
  variables are stored as Keras stores them, so the file of a model
  without sharded tables is unchanged, and a fixed table's slots are the
  ones a plain ``Embedding`` model's optimizer writes.
- loading (each rank on its own, at any world size): a fixed table's slot
  takes its rows of the whole slot; a dynamic table's slot keeps the keys
  this rank owns, the i-th of them in key order at row i, which is where
  the table's own load puts the same key (dynamic_checkpoint.restore_rows).

The allgathers of a save run in the optimizer's variable order, the same
on every rank for the same model.
"""
from typing import Any, Callable, List

import numpy as np

from hbcore_tf._base.rank_local import local_value, shard_info, whole_value
from hbcore_tf.embedding import dynamic_checkpoint

KEYS_SUFFIX = "-keys"


class OptimizerStateError(ValueError):
    """A saved optimizer state that does not fit the optimizer's sharded
    slots."""


def _has_sharded_slots(variables: List[Any]) -> bool:
    return any(shard_info(v) is not None for v in variables)


def _dynamic_table(variable: Any) -> Any:
    return dynamic_checkpoint.table_of(variable)


def save_state(original: Callable, optimizer: Any, store: Any) -> None:
    """``optimizer.save_own_variables(store)`` (see the module docstring).

    Args:
        original: Keras' method.
        optimizer: the optimizer.
        store: Keras' weights store of the optimizer.
    """
    variables = list(optimizer.variables)
    if not _has_sharded_slots(variables):
        return original(optimizer, store)
    for i, variable in enumerate(variables):
        table = _dynamic_table(variable)
        if table is None:
            store[str(i)] = whole_value(variable)
        else:
            keys, values = dynamic_checkpoint.whole_rows(table, variable)
            store[str(i)] = values
            store[str(i) + KEYS_SUFFIX] = keys
    return None


def load_state(original: Callable, optimizer: Any, store: Any) -> None:
    """``optimizer.load_own_variables(store)`` (see the module docstring).

    Args:
        original: Keras' method.
        optimizer: the optimizer.
        store: Keras' weights store of the optimizer.

    Raises:
        OptimizerStateError: a sharded table's saved slot of another row
            count (or a dynamic one without its keys); the message names
            the slot.
    """
    variables = list(optimizer.variables)
    if not _has_sharded_slots(variables):
        return original(optimizer, store)
    names = [k for k in store.keys() if not k.endswith(KEYS_SUFFIX)]
    if len(names) != len(variables):
        return original(optimizer, store)  # Keras' warning, nothing loaded
    for i, variable in enumerate(variables):
        value = store[str(i)]
        info = shard_info(variable)
        table = _dynamic_table(variable)
        if table is not None:
            keys = str(i) + KEYS_SUFFIX
            if keys not in store.keys():
                raise OptimizerStateError(
                    "optimizer slot %r of dynamic embedding table %r: the "
                    "file holds no keys for it (saved without hbcore, or "
                    "from another model?)" % (_name(variable),
                                               table.info.name))
            dynamic_checkpoint.restore_rows(table, variable,
                                            np.asarray(store[keys]),
                                            np.asarray(value))
            continue
        if info is not None and info.rows != info.num_rows:
            rows = tuple(np.shape(value))[:1]
            if rows != (info.num_rows,):
                raise OptimizerStateError(
                    "optimizer slot %r of sharded embedding table %r: the "
                    "file holds %s rows, expected the whole table's %d" % (
                        _name(variable), info.name,
                        rows[0] if rows else "no", info.num_rows))
            value = local_value(variable, np.asarray(value))
        variable.assign(value)
    return None


def _name(variable: Any) -> str:
    return str(getattr(variable, "path", None) or variable.name)
