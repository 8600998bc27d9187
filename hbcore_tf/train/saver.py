"""``hb.train.Saver``: HybridBackend's Saver, on hbcore's checkpoints.

HybridBackend's Saver is ``tf.compat.v1.train.Saver`` made collective:
every rank calls ``save`` with the same arguments, each rank contributes
its rows of the sharded embedding tables, rank 0 writes everything else,
the checkpoint state file and the meta graph. In hbcore most of that is
already true of the plain Saver, and this class adds only the rest:

- sharded tables: a plain Saver whose variables include them already
  saves collectively (hbcore_tf.embedding.save_protocol: every rank calls save,
  rank 0 writes and merges, every rank returns the prefix); this class
  calls that save unchanged;
- no sharded tables, world size > 1: TF's save would write the same files
  from every rank into the shared directory at once. Here rank 0 writes
  the checkpoint, its state file and meta graph; ranks > 0 write nothing
  and return the prefix rank 0 writes. This save is NOT collective, so
  a Horovod-style ``if rank == 0: saver.save(...)`` (what
  hb.train.MonitoredTrainingSession's checkpoint hook does for such
  graphs) works as well;
- ``sharded=True`` and ``allow_empty=True`` are forced, and the save and
  restore ops are placed on the CPU, as HybridBackend's constructor does;
- ``export_meta_graph`` writes its file on rank 0 only;
- inside ``hb.scope`` the scope's Saver defaults (``save_relative_paths``,
  the ``keep_checkpoint_max`` / ``keep_checkpoint_every_n_hours``
  options; hbcore_tf.scope) apply to this class as to its base, because
  its constructor is the base constructor the scope patches.

``restore`` is TF's: every rank reads its own rows of each table.
"""
import inspect
from typing import Any, Optional

import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf.embedding import checkpoint_savers as _saving

_V1 = tf.compat.v1


class Saver(_V1.train.Saver):
    """tf.compat.v1.train.Saver for data-parallel training with sharded
    embedding tables (see the module docstring).

    Args:
        *args, **kwargs: tf.compat.v1.train.Saver's arguments, positional
            or by name; ``sharded`` and ``allow_empty`` are always True.

    Raises:
        TypeError: an argument tf.compat.v1.train.Saver does not take, or
            one given twice.
        ValueError: as tf.compat.v1.train.Saver's (e.g. a bad var_list).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Every argument by name, so that the overrides below replace a
        # positional one instead of colliding with it, and so that the
        # hb.scope patch of the base constructor sees exactly the
        # arguments the caller gave (an absent one gets the scope's
        # default). Binds against TF's signature (inspect follows the
        # scope patch's __wrapped__), raising TypeError as a call would.
        bound = inspect.signature(_V1.train.Saver.__init__).bind(
            self, *args, **kwargs)
        arguments = dict(bound.arguments)
        del arguments["self"]
        arguments["sharded"] = True
        arguments["allow_empty"] = True
        with tf.device("/cpu:0"):
            super().__init__(**arguments)

    def save(self, sess: Any, save_path: str, global_step: Any = None,
             *args: Any, **kwargs: Any) -> Optional[str]:
        """Saves a checkpoint written by rank 0 and, for sharded tables,
        by every rank (see the module docstring).

        Args:
            sess: the tf.compat.v1 Session.
            save_path: the checkpoint prefix (the same on every rank; a
                directory every rank can reach when the graph holds
                sharded tables).
            global_step: appended to the prefix, as TF's.
            *args, **kwargs: the rest of tf.compat.v1.train.Saver.save's
                arguments (``latest_filename``, ``write_meta_graph``, ...).

        Returns:
            The checkpoint prefix rank 0 writes, on every rank; None when
            the Saver has no variables.

        Raises:
            hbcore_tf.embedding.save_protocol.ShardedSaveError: a collective save
                of sharded tables failed on some rank (raised on every
                rank).
            ValueError, TypeError, RuntimeError: as TF's Saver.save, on
                the ranks that run it.
        """
        if (context.rank == 0 or context.world_size == 1
                or _saving.saves_collectively(self)):
            return super().save(sess, save_path, global_step, *args,
                                **kwargs)
        # A rank > 0 without sharded state: rank 0 writes the whole
        # checkpoint; this rank names it as TF's save would.
        if self._is_empty:
            return None
        return _saving.checkpoint_prefix(self, sess, save_path, global_step)

    def export_meta_graph(self, filename: Optional[str] = None,
                          *args: Any, **kwargs: Any) -> Any:
        """TF's export_meta_graph; ranks > 0 return the MetaGraphDef
        without writing ``filename`` (rank 0 writes it).

        Args:
            filename: where rank 0 writes the meta graph (None: nowhere).
            *args, **kwargs: as tf.compat.v1.train.Saver.export_meta_graph's.

        Returns:
            The MetaGraphDef.
        """
        if context.rank != 0:
            filename = None
        return super().export_meta_graph(filename, *args, **kwargs)


def replace_default_saver() -> None:
    """HybridBackend's ``hb.train.replace_default_saver()``: makes the
    default graph's default saver (the one in the SAVERS collection, which
    tf.compat.v1.train.Scaffold and MonitoredTrainingSession take) an
    ``hb.train.Saver``.

    With no saver in the collection, adds ``hb.train.Saver()`` (every
    saveable of the graph); with an ``hb.train.Saver`` there, does nothing.

    Raises:
      ValueError: the collection holds more than one saver (as
        HybridBackend), or a saver of another class: HybridBackend swaps
        the saver builder of a built sharded Saver, which hbcore cannot
        do; create that saver as ``hb.train.Saver(...)`` instead.
    """
    savers = _V1.get_collection_ref(_V1.GraphKeys.SAVERS)
    if not savers:
        savers.append(Saver())
        return
    if len(savers) > 1:
        raise ValueError("replace_default_saver: multiple items found in "
                         "collection SAVERS: %s" % (savers,))
    if not isinstance(savers[0], Saver):
        raise ValueError(
            "replace_default_saver: the SAVERS collection holds a %s.%s, "
            "which cannot be changed once built; create it as "
            "hb.train.Saver(...) instead (the same arguments)"
            % (type(savers[0]).__module__, type(savers[0]).__name__))
