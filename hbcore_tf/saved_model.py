"""``hb.saved_model``: export a plain TensorFlow SavedModel from rank 0.

A data-parallel model holds the same values on every rank, so one copy is
written, by rank 0; the SavedModel is an ordinary one (no hbcore op in
it), loadable and servable without hbcore. The sharded-embedding issue
extends this module (full tables gathered into the export).
"""
from typing import Any, Optional

import tensorflow as tf


def export(export_dir: str, obj: Any, signatures: Any = None,
           options: Optional[Any] = None, barrier: bool = True) -> Optional[str]:
    """Saves ``obj`` (a tf.Module or Keras model) with
    ``tf.saved_model.save`` on rank 0.

    Args:
        export_dir: the SavedModel directory.
        obj: what to save.
        signatures, options: passed to tf.saved_model.save.
        barrier: every rank waits until rank 0 has written the model (a
            collective: call it on every rank).

    Returns:
        ``export_dir`` on rank 0, None on the other ranks.
    """
    from hbcore_tf.context import context

    written = None
    if context.rank == 0:
        tf.saved_model.save(obj, export_dir, signatures=signatures,
                            options=options)
        written = export_dir
    if barrier:
        import hbcore

        hbcore.barrier()
    return written


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
    from hbcore_tf.context import context

    written = None
    if context.rank == 0:
        tf.compat.v1.saved_model.simple_save(session, export_dir, inputs,
                                             outputs)
        written = export_dir
    if barrier:
        import hbcore

        hbcore.barrier()
    return written
