"""Keras saving of models holding sharded embedding tables
(hb.keras.layers.ShardedEmbedding): ``save_weights`` and ``save`` are
collective (every rank calls them: the tables are allgathered) and only
rank 0 writes the file; the other ranks write to a temporary file they
delete. Other models save exactly as before.

The behaviour is put into Keras' ``Model.save`` / ``save_weights`` by
hbcore_tf._patches.keras_model_save (and, for tf_keras's legacy HDF5
files, hbcore_tf._patches.tf_keras_hdf5 through keras/legacy_h5.py); see
``make_saving_collective`` for when.
"""
import contextlib
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator

import hbcore

from hbcore_tf._base.rank_local import is_sharded
from hbcore_tf._patches import keras_model_save
from hbcore_tf.keras import legacy_h5, optimizer_saving


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
    tmp = None if hbcore.rank() == 0 else tempfile.mkdtemp(prefix="hb_save_")
    try:
        yield filepath if tmp is None else os.path.join(tmp, name)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    hbcore.barrier()


def _save(tf_keras: bool) -> Callable:
    def save(original: Callable, model: Any, filepath: Any,
             *args: Any, **kwargs: Any) -> Any:
        with rank_zero_writes(model, filepath, "save", tf_keras) as path:
            return original(model, path, *args, **kwargs)
    return save


def _save_weights(tf_keras: bool) -> Callable:
    def save_weights(original: Callable, model: Any, filepath: Any,
                     *args: Any, **kwargs: Any) -> Any:
        save_format = kwargs.get("save_format",
                                 args[1] if len(args) > 1 else None)
        if tf_keras and writes_tf_checkpoint(filepath, save_format):
            return original(model, filepath, *args, **kwargs)
        with rank_zero_writes(model, filepath, "save_weights",
                              tf_keras) as path:
            return original(model, path, *args, **kwargs)
    return save_weights


def make_saving_collective(tf_keras: bool) -> None:
    """Makes the flavour's ``Model.save`` and ``save_weights`` run in
    ``rank_zero_writes`` (idempotent): a model holding sharded tables is
    saved collectively, every rank calling, rank 0 alone writing the file;
    other models save exactly as before. Called by the first sharded
    ShardedEmbedding that is built (hbcore_tf.keras.layers), so models
    built outside hb.scope() are covered too: before, each of their ranks
    wrote the same file at once.

    tf_keras's TensorFlow checkpoint format (``save_weights`` to a path
    without an HDF5 suffix) is passed through unchanged on every rank: it
    is written by tf.train.Checkpoint, whose save is already collective for
    sharded tables (hbcore_tf.embedding.checkpoint_savers: rank 0 writes,
    the other ranks' rows are merged in), and read back slice by slice at
    any world size by ``load_weights``.

    The flavour's optimizers store and load their state in those files
    through hbcore_tf.keras.optimizer_saving (slots of sharded tables
    whole).

    Args:
        tf_keras: tf_keras's Model (True) or Keras 3's (False).
    """
    if tf_keras:
        legacy_h5.install()
    keras_model_save.install(tf_keras, _save(tf_keras), _save_weights(tf_keras),
                             optimizer_saving.save_state,
                             optimizer_saving.load_state)
