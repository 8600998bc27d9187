"""The collective save of sharded tables in TF's two checkpoint writers:
tf.compat.v1.train.Saver and tf.train.Checkpoint (protocol:
save_protocol.py).

``install_patches`` puts the behaviour into TF through
hbcore_tf._patches.saver (``Saver._build`` takes the dynamic tables out
of the Saver's variables, dynamic_saver.py, and adds a companion Saver
of the rank's fixed sharded state; ``Saver.save`` runs the protocol,
writing the dynamic tables' slices beside the companion's;
``Saver.restore`` restores the dynamic tables by key after TF's
restore) and
hbcore_tf._patches.trackable_saver (tf.train.Checkpoint's writer). It is
called by the first sharded table (embedding/sharding.py's sharding getter,
hb.keras.layers.ShardedEmbedding.build) and kept: Savers and checkpoints
are usually built and called outside any hb.scope (MonitoredTrainingSession,
a training loop), so a scope-bound patch would miss them; every
replacement falls through to TF's code unchanged when no sharded table is
among the variables saved. At world size 1 TF's own save writes the
checkpoint and the canonical rewrite follows.
"""
import numbers
from typing import Any, Callable, List, Optional

import tensorflow as tf

from hbcore_tf._base.context import context
from hbcore_tf._base.rank_local import any_sharded_tables, shard_info
from hbcore_tf._patches import internals
from hbcore_tf._patches import saver as saver_patch
from hbcore_tf._patches import trackable_saver as trackable_saver_patch
from hbcore_tf.embedding.dynamic_checkpoint import (dynamic_variables,
                                                   prepared_save)
from hbcore_tf.embedding.dynamic_saver import (DynamicSaver, split_dynamic,
                                               write_bundle)
from hbcore_tf.embedding.save_protocol import (NOTHING_WRITTEN,
                                               ShardedSaveError,
                                               collective_write,
                                               merge_parts, write_canonical)
from hbcore_tf.embedding.sharded_state import (saver_variables,
                                               sharded_state, table_names)

_COMPANION = "_hb_sharded_companion"
_DYNAMIC_SAVER = "_hb_dynamic_saver"
# Where a rank writes its dynamic tables' slices before merging them into
# its part (or, on rank 0, into the checkpoint).
_DYNAMIC_PART = "_hbdynamic"
_V1 = tf.compat.v1

__all__ = ["ShardedSaveError", "checkpoint_prefix", "collective_save",
           "install_patches", "saves_collectively"]


def _checkpoint_file(saver: Any, sess: Any, save_path: str,
                     global_step: Any) -> tuple:
    """TF's naming rule of Saver.save: (prefix, step as an int or None)."""
    if global_step is None:
        return save_path, None
    if not isinstance(global_step, numbers.Integral):
        global_step = int(_V1.train.global_step(sess, global_step))
    if getattr(saver, "_pad_step_number", False):
        return ("%s-%s" % (save_path, "{:08d}".format(global_step)),
                int(global_step))
    return "%s-%d" % (save_path, global_step), int(global_step)


def checkpoint_prefix(saver: Any, sess: Any, save_path: str,
                      global_step: Any = None) -> str:
    """The prefix ``saver.save(sess, save_path, global_step)`` writes (TF's
    naming rule, the step padded when the Saver pads it).

    Args:
        saver: a tf.compat.v1.train.Saver.
        sess: the session (reads ``global_step`` when it is a tensor).
        save_path: the prefix given to save.
        global_step: None, an int, or a tensor / variable.

    Returns:
        The checkpoint prefix.
    """
    return _checkpoint_file(saver, sess, save_path, global_step)[0]


def saves_collectively(saver: Any) -> bool:
    """Whether ``saver.save`` is the collective save of sharded tables
    (its variables include one, so every rank must call save).

    Args:
        saver: a tf.compat.v1.train.Saver.

    Returns:
        True when the Saver holds sharded tables (fixed or dynamic).
    """
    return (getattr(saver, _COMPANION, None) is not None
            or getattr(saver, _DYNAMIC_SAVER, None) is not None)


def collective_save(saver: Any, tf_save: Callable, sess: Any, save_path: str,
                    global_step: Any = None, *args: Any, **kwargs: Any
                    ) -> Optional[str]:
    """Saver.save with sharded tables (the module docstring's protocol;
    at world size 1, TF's save, the dynamic tables merged in, and the
    canonical rewrite). Called on every rank.

    Args:
        saver: the user's tf.compat.v1.train.Saver (with a companion or
            dynamic tables).
        tf_save: TF's unpatched Saver.save.
        sess, save_path, global_step, *args, **kwargs: Saver.save's.

    Returns:
        The checkpoint prefix written by rank 0, on every rank (None when
        the Saver's save returned None).

    Raises:
        ShardedSaveError: a rank failed to write its part, the ranks
            disagree on the prefix, or rank 0 failed to write or merge.
    """
    companion = getattr(saver, _COMPANION, None)
    dynamic = getattr(saver, _DYNAMIC_SAVER, None)
    path, step = _checkpoint_file(saver, sess, save_path, global_step)
    # Collective (evicts, then redistributes): before any rank writes.
    entries = dynamic.prepare(sess) if dynamic is not None else {}

    def add_dynamic(prefix: str) -> None:
        # Merges this rank's dynamic slices into the bundle ``prefix``.
        write_bundle(prefix + _DYNAMIC_PART, entries)
        merge_parts(prefix, [prefix + _DYNAMIC_PART])

    def write_part(part: str) -> Any:
        if companion is not None:
            companion.saver.save(sess, part, write_meta_graph=False,
                                 write_state=False)
            if entries:
                add_dynamic(part)
        elif entries:
            write_bundle(part, entries)
        else:
            return NOTHING_WRITTEN
        return part

    def write_main() -> Any:
        value = tf_save(saver, sess, save_path,
                        step if step is not None else global_step,
                        *args, **kwargs)
        if value is not None and entries:
            add_dynamic(path)
        return value

    if context.world_size == 1:
        value = write_main()
        if value is not None:
            write_canonical(path)
        return value
    tables = sorted((companion.tables if companion else []) +
                    (dynamic.tables if dynamic else []))
    return collective_write(path, tables, write_part, write_main)


class _Companion:
    """The Saver of one rank's sharded state, built beside a user Saver."""

    def __init__(self, saver: Any, tables: List[str]) -> None:
        self.saver = saver
        self.tables = tables


# --- what the patches run (hbcore_tf._patches.saver, trackable_saver) ----------------

def _split_dynamic(self: Any) -> None:
    # Before TF's Saver._build: the dynamic tables leave the Saver's
    # variables (TF would write each rank's rows under one name) and are
    # saved by key (dynamic_saver.py), with ops built now, while the graph
    # is not finalized.
    if (getattr(self, "_hb_is_companion", False) or tf.executing_eagerly()
            or hasattr(self, _DYNAMIC_SAVER)):
        return
    var_list = self._var_list
    if var_list is None:
        var_list = _V1.global_variables() + _V1.get_collection(
            _V1.GraphKeys.SAVEABLE_OBJECTS)
    rest, named = split_dynamic(var_list)
    if not named:
        object.__setattr__(self, _DYNAMIC_SAVER, None)
        return
    # With nothing else to save the Saver is empty (or TF refuses it):
    # its save refuses (_saver_save).
    self._var_list = rest
    object.__setattr__(self, _DYNAMIC_SAVER, DynamicSaver(named))


def _add_companion(self: Any) -> None:
    # After TF's Saver._build: a Saver of fixed sharded state gets its
    # companion (built now: MonitoredTrainingSession finalizes the graph
    # right after).
    if (getattr(self, "_hb_is_companion", False) or tf.executing_eagerly()
            or hasattr(self, _COMPANION)):
        return
    state = sharded_state(saver_variables(self))
    # Dynamic tables were taken out (_split_dynamic); a store that is no
    # slice of a whole table and still here cannot be written by a Saver.
    dynamic = sorted({shard_info(v).name for v in state
                      if shard_info(v) is not None
                      and shard_info(v).partition.hashed})
    if dynamic:
        raise NotImplementedError(
            "tf.compat.v1 Saver: dynamic embedding tables %s are not "
            "known as dynamic tables and cannot be saved by a Saver "
            "(docs/embedding.md, \"Dynamic tables\")" % dynamic)
    if not state:
        return
    companion = _V1.train.Saver.__new__(_V1.train.Saver)
    companion._hb_is_companion = True
    with tf.name_scope("hb_sharded_save"):
        companion.__init__(var_list=state, sharded=False, allow_empty=True,
                           max_to_keep=None,
                           write_version=_V1.train.SaverDef.V2)
    object.__setattr__(self, _COMPANION,
                       _Companion(companion, table_names(state)))


def _saver_save(tf_save: Callable, self: Any, sess: Any, save_path: str,
                global_step: Any = None, *args: Any, **kwargs: Any) -> Any:
    # Saver.save: collective when the Saver holds sharded tables.
    dynamic = getattr(self, _DYNAMIC_SAVER, None)
    if dynamic is not None and getattr(self, "_is_empty", False):
        raise ValueError(
            "tf.compat.v1 Saver: its variables are only dynamic embedding "
            "tables %s; add another variable (e.g. the global step) so "
            "that the Saver writes a checkpoint to merge them into" %
            dynamic.tables)
    if saves_collectively(self):
        return collective_save(self, tf_save, sess, save_path, global_step,
                               *args, **kwargs)
    return tf_save(self, sess, save_path, global_step, *args, **kwargs)


def _saver_restore(tf_restore: Callable, self: Any, sess: Any,
                   save_path: Any) -> Any:
    # Saver.restore: TF's, then the dynamic tables by key.
    out = tf_restore(self, sess, save_path)
    dynamic = getattr(self, _DYNAMIC_SAVER, None)
    if dynamic is not None:
        dynamic.restore(sess, save_path)
    return out


def _object_save(tf_save: Callable, self: Any, file_prefix: Any,
                 checkpoint_number: Any = None, session: Any = None,
                 options: Any = None) -> Any:
    # tf.train.Checkpoint's writer (TrackableSaver.save), eager only: the
    # sharded tables among the objects make the write collective.
    def plain() -> Any:
        return tf_save(self, file_prefix, checkpoint_number, session, options)

    if (not tf.executing_eagerly() or not isinstance(file_prefix, str)
            or not any_sharded_tables()):
        return plain()
    dynamic = dynamic_variables(self._gather_serialized_tensors(None)[0])
    # Dynamic tables serialize their slices of the sorted table while the
    # save is prepared (collective: dynamic_checkpoint.py).
    with prepared_save(dynamic):
        serialized = self._gather_serialized_tensors(None)[0]
        sharded = internals.OBJECT_IDENTITY_DICT.load()()
        for obj, tensors in serialized.items():
            if obj is not None and shard_info(obj) is not None:
                sharded[obj] = tensors
        if not sharded:
            return plain()
        if context.world_size == 1:
            path = plain()
            write_canonical(_as_str(path))
            return path
        path = file_prefix
        if checkpoint_number:
            path = "%s-%d" % (file_prefix, int(checkpoint_number))
        saver_class = internals.MULTI_DEVICE_SAVER.load()

        def write_part(part: str) -> Any:
            # A dynamic table with fewer keys than ranks leaves some ranks
            # nothing to write (TF cannot write an empty bundle).
            if not any(sharded.values()):
                return NOTHING_WRITTEN
            return saver_class(sharded).save(part)
        return collective_write(path, table_names(sharded), write_part,
                                plain)


def _as_str(path: Any) -> str:
    """A checkpoint path as TrackableSaver.save returns it (a string, or
    an eager string tensor), as a str."""
    if isinstance(path, tf.Tensor):
        path = path.numpy()
    return path.decode() if isinstance(path, bytes) else str(path)


def install_patches() -> None:
    """Makes TF's Saver and tf.train.Checkpoint saves collective for
    sharded tables (idempotent; see the module docstring). Called by the
    first sharded table."""
    saver_patch.install(_split_dynamic, _add_companion, _saver_save,
                        _saver_restore)
    trackable_saver_patch.install(_object_save)
