"""``hb.saved_model``: export a plain TensorFlow SavedModel from rank 0.

A data-parallel model holds the same values on every rank, so one copy is
written, by rank 0; the SavedModel is an ordinary one (no hbcore op in
it), loadable and servable without hbcore. ``export`` also takes
HybridBackend's signature ``export(export_dir_base, checkpoint_path,
signature_def_fn, ...)``: a SavedModel built from a checkpoint, with every
sharded embedding table whole (hbcore_tf.embedding.export.export), and
``export_all`` is HybridBackend's SavedModel of several signatures from a
checkpoint (hbcore_tf.embedding.export.export_all).
"""
import os
from typing import Any, Optional

import tensorflow as tf

import hbcore
from hbcore_tf._base.context import context
from hbcore_tf.embedding import export as _export


_UNSET = object()


def export(export_dir: str, obj: Any, signatures: Any = None,
           options: Any = _UNSET, barrier: Any = _UNSET,
           *args: Any, **kwargs: Any) -> Optional[str]:
    """Saves ``obj`` (a tf.Module or Keras model) with
    ``tf.saved_model.save`` on rank 0.

    Called as ``export(export_dir_base, checkpoint_path, signature_def_fn,
    assets_extra=None, as_text=False, clear_devices=True,
    strip_default_attrs=True, mode='infer')`` (a checkpoint path and a
    callable: HybridBackend's signature), it is
    hbcore_tf.embedding.export.export instead, and returns the export
    directory on every rank.

    Args:
        export_dir: the SavedModel directory.
        obj: what to save.
        signatures, options: passed to tf.saved_model.save.
        barrier: every rank waits until rank 0 has written the model (a
            collective: call it on every rank).

    Returns:
        ``export_dir`` on rank 0, None on the other ranks.
    """
    if isinstance(obj, (str, bytes, os.PathLike)) and callable(signatures):
        # HybridBackend's signature: signatures is signature_def_fn and
        # the next positional arguments are assets_extra, as_text, ...
        rest = [a for a in (options, barrier) if a is not _UNSET]
        return _export.export(export_dir, obj, signatures,
                              *(rest + list(args)), **kwargs)
    if args or kwargs:
        raise TypeError("export() got unexpected arguments %r %r" % (
            args, sorted(kwargs)))
    options = None if options is _UNSET else options
    barrier = True if barrier is _UNSET else barrier
    written = None
    if context.rank == 0:
        tf.saved_model.save(obj, export_dir, signatures=signatures,
                            options=options)
        written = export_dir
    if barrier:
        hbcore.barrier()
    return written


def export_all(export_dir_base: str, checkpoint_path: str,
               signature_defs_and_main_op_fn: Any, *args: Any,
               **kwargs: Any) -> str:
    """HybridBackend's ``hb.saved_model.export_all``: a SavedModel from a
    checkpoint, with the signatures (and optionally the main op) that
    ``signature_defs_and_main_op_fn`` returns, sharded tables whole.

    Args:
        export_dir_base: the SavedModel goes to ``<base>/<timestamp>``.
        checkpoint_path: a checkpoint prefix, or a directory (its latest).
        signature_defs_and_main_op_fn: returns a dict key -> SignatureDef,
            or ``(dict, main_op)``.
        *args, **kwargs: ``assets_extra=None, as_text=False,
            clear_devices=True, strip_default_attrs=True, modes=None``
            (hbcore_tf.embedding.export.export_all).

    Returns:
        The export directory, on every rank (call it on every rank).

    Raises:
        ValueError: see hbcore_tf.embedding.export.export_all.
    """
    return _export.export_all(export_dir_base, checkpoint_path,
                              signature_defs_and_main_op_fn, *args, **kwargs)


def export_v1(export_dir: str, session: Any, inputs: dict, outputs: dict,
              barrier: bool = True) -> Optional[str]:
    """Saves a tf.compat.v1 graph's serving signature
    (``tf.compat.v1.saved_model.simple_save``) on rank 0.

    Args:
        export_dir: the SavedModel directory (must not exist).
        session: a tf.compat.v1.Session holding the trained variables (for
            a MonitoredSession, pass its raw session).
        inputs, outputs: name -> tensor of the serving signature.
        barrier: every rank waits for rank 0 (call it on every rank).

    Returns:
        ``export_dir`` on rank 0, None on the other ranks.
    """
    written = None
    if context.rank == 0:
        tf.compat.v1.saved_model.simple_save(session, export_dir, inputs,
                                             outputs)
        written = export_dir
    if barrier:
        hbcore.barrier()
    return written
