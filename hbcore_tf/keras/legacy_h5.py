"""tf_keras's legacy HDF5 files with sharded tables: ``save_weights`` and
``save`` to ``.h5``/``.hdf5``, ``load_weights``, ``load_model``.

Those files are written and read by tf_keras's ``hdf5_format`` module,
which reads and sets variables directly instead of going through the
layers' ``save_own_variables``: left alone, it would store each rank's
rows as if they were the table. ``install`` wraps, once, the module's
functions that touch variable values, and the optimizers' ``set_weights``
that ``load_model`` restores the optimizer with (the patch is
hbcore_tf._patches.tf_keras_hdf5; this module gives it the values):

- saving: the value stored for a sharded table or optimizer slot is the
  whole ``[input_dim, output_dim]`` tensor in id order (allgathered, so
  every rank runs the save:
  ``hbcore_tf.keras.model_saving.rank_zero_writes`` gives ranks > 0 a
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
from hbcore_tf._base.rank_local import local_value, shard_info, whole_value
from hbcore_tf._patches import tf_keras_hdf5


def install() -> None:
    """Wraps tf_keras's HDF5 saving and the optimizers' ``set_weights``
    (idempotent; see the module docstring; hbcore_tf._patches.tf_keras_hdf5
    installs them). Models without sharded tables save and load exactly as
    before."""
    tf_keras_hdf5.install(lambda v: shard_info(v) is not None, whole_value,
                          local_value)
