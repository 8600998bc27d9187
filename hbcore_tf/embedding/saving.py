"""Checkpoints of sharded embedding tables: one logical variable each.

A checkpoint holds every sharded table, and each of its optimizer slots, as
the full ``[num_rows, dim]`` tensor in id order under the table's own name,
whatever the world size. Each rank's rows are a TF *slice* of that tensor
(``SaveSliceInfo``, set by hbcore_tf.embedding.table; v1 optimizer slots
inherit slices of their own through TF's slot_creator), so TF's own
machinery does the rest:

- ``tf.train.load_variable``, ``NewCheckpointReader`` and a plain
  ``Saver.restore`` of a full variable assemble the slices (BundleReader);
- ``Saver.restore`` of a slice reads just that slice from any checkpoint
  holding the full tensor or slices of it, so a checkpoint written at N
  ranks restores at M ranks, at one process with plain variables, and a
  plain model's checkpoint restores into a sharded one.

What TF lacks is a save in which several processes write one checkpoint.
Collective save protocol (``tf.compat.v1.train.Saver.save`` when its
variables include sharded tables and the world has more than one rank):

1. Every rank calls ``saver.save`` with the same arguments (HybridBackend's
   rule; Horovod scripts that save on rank 0 only must call it on every
   rank). Each rank computes the checkpoint prefix ``path`` as TF does.
2. Rank r > 0 saves its slices (tables and slots only) with a companion
   Saver to ``path + "_hbpart-r-of-n"``, next to ``path``.
3. Handshake 1 (``allgather_object`` named after the tables): every rank's
   prefix and status. A failure or a prefix mismatch on any rank is an
   error on every rank. A save called on rank 0 alone waits here, and the
   stall check reports the tables by name (HB_STALL_CHECK_TIME_SECONDS);
   HB_STALL_SHUTDOWN_TIME_SECONDS turns it into an error.
4. Rank 0 runs the user's Saver unchanged (dense variables once, its own
   slices, the checkpoint state file, max_to_keep, the meta graph), then
   merges the parts into ``path`` with TF's MergeV2Checkpoints (which
   merges slices of one tensor across bundles and renames the parts' data
   files into ``path``'s: no rank ever holds the whole table), and
   rewrites the result into its canonical form (canonical.py: one data
   file, every table and slot in id order as one tensor, or as fixed row
   blocks when larger than ``emb_checkpoint_block_bytes``; streamed, so
   again no rank holds a whole table).
5. Handshake 2 (``broadcast_object``): rank 0's result; every rank returns
   ``path`` or raises rank 0's error, and removes a part left over.

The checkpoint directory must therefore be one directory that every rank
can reach (a shared filesystem, as for TF's parameter-server training);
restoring needs that anyway, since every rank reads its own rows. The
checkpoint's files (index and data) are the same bytes whatever the world
size that wrote them; the Saver's .meta file is not (it is the writing
rank's graph, whose table variables are that rank's shards).

The companion Saver is built when the user's Saver is built, because
MonitoredTrainingSession finalizes the graph right after.

tf.train.Checkpoint (eager) follows the same protocol: a sharded table
serializes itself as its slice of the full tensor (table.py), rank r > 0
writes only its tables' slices with TF's MultiDeviceSaver, rank 0 writes
the whole object checkpoint and merges. Every rank's Checkpoint.save also
updates the ``checkpoint`` state file, with identical contents.

Patching (kept in this module, installed once when hbcore_tf.embedding is
imported, never undone): ``Saver._build`` (adds the companion),
``Saver.save`` and tf.train.Checkpoint's ``TrackableSaver.save`` (run the
protocol). Savers and checkpoints are usually built and called outside any
hb.scope (MonitoredTrainingSession, a training loop), so a scope-bound
patch would miss them; every patch falls through to TF's code unchanged
when no sharded table is among the variables saved. At world size 1 TF's
own save writes the checkpoint and the canonical rewrite follows.
"""
import numbers
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import tensorflow as tf

from hbcore_tf._base.rank_local import any_sharded_tables, shard_info

_COMPANION = "_hb_sharded_companion"
_PART = "_hbpart-%05d-of-%05d"
_V1 = tf.compat.v1


# --- which variables are sharded state ---------------------------------------------

def _slice_info(variable: Any) -> Any:
    return getattr(variable, "_save_slice_info", None)


def sharded_state(variables: Iterable[Any]) -> List[Any]:
    """The sharded tables among ``variables`` and their optimizer slots.

    A slot of a table is a variable whose checkpoint slice is named
    ``<table>/<slot>`` and covers the same rows as the table's shard
    (TF's slot_creator gives it that slice).

    Args:
        variables: tf.Variables (e.g. tf.compat.v1.global_variables()).

    Returns:
        The variables, in the given order, that each rank holds only its
        rows of.
    """
    variables = list(variables)
    tables = {}
    for v in variables:
        info = shard_info(v)
        if info is not None:
            tables[info.name] = info
    if not tables:
        return []
    found = []
    for v in variables:
        if shard_info(v) is not None:
            found.append(v)
            continue
        sl = _slice_info(v)
        if sl is None or "/" not in sl.full_name:
            continue
        info = tables.get(sl.full_name.rsplit("/", 1)[0])
        if (info is not None and list(sl.var_offset[:1]) == [info.offset]
                and list(sl.var_shape[:1]) == [info.rows]):
            found.append(v)
    return found


def _saver_variables(saver: Any) -> List[Any]:
    var_list = getattr(saver, "_var_list", None)
    if var_list is None:
        return _V1.global_variables()
    if isinstance(var_list, dict):
        var_list = list(var_list.values())
    flat = []
    for v in var_list:
        if isinstance(v, (list, tuple)):
            flat.extend(v)
        elif isinstance(v, tf.Variable):
            flat.append(v)
    return flat


def _table_names(variables: Iterable[Any]) -> List[str]:
    return sorted({shard_info(v).name for v in variables
                   if shard_info(v) is not None})


# --- the collective save -------------------------------------------------------

def part_prefix(path: str, rank: int, size: int) -> str:
    """Where rank ``rank`` writes its slices of the checkpoint ``path``.

    Args:
        path: the checkpoint prefix.
        rank: the writing rank.
        size: the world size.

    Returns:
        The part's prefix, ``path + "_hbpart-<rank>-of-<size>"`` (numbers
        written with five digits).
    """
    return path + _PART % (rank, size)


def _run_raw(build: Callable[[], Any]) -> None:
    """Runs an op built by ``build`` in a private graph and session (the
    caller's graph may be finalized; works in eager processes too)."""
    with tf.Graph().as_default():
        op = build()
        with _V1.Session() as session:
            session.run(op)


def merge_parts(path: str, parts: List[str]) -> None:
    """Merges the bundles ``parts`` into the checkpoint ``path`` in place
    (TF's MergeV2Checkpoints: slices of one tensor are merged into one
    entry; every data file is renamed, never read whole).

    Args:
        path: a V2 checkpoint prefix, written.
        parts: further V2 checkpoint prefixes in the same directory.

    Raises:
        tf.errors.OpError: the merge failed (e.g. a part is missing).
    """
    if not parts:
        return
    # MergeV2Checkpoints deletes the index of every input, the destination
    # included when it is one of them: merge into a staging prefix, then
    # rename (a bundle's data files are found by name, never recorded in
    # its index), the index last so that a reader sees a complete bundle.
    staging = path + "_hbmerge"
    _run_raw(lambda: tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[path] + list(parts), destination_prefix=staging,
        delete_old_dirs=False))
    for name in sorted(tf.io.gfile.glob(staging + ".data-*")):
        tf.io.gfile.rename(name, path + name[len(staging):], overwrite=True)
    tf.io.gfile.rename(staging + ".index", path + ".index", overwrite=True)


def write_canonical(path: str) -> None:
    """Rewrites the checkpoint ``path`` (written by this process alone)
    into the form whose bytes do not depend on the world size
    (canonical.py): called by rank 0 after the merge, and at world size 1
    after TensorFlow's own save.

    Row blocks are at most the ``emb_checkpoint_block_bytes`` option.

    Args:
        path: a V2 checkpoint prefix.

    Raises:
        ValueError: the bundle is malformed or uses a feature canonical.py
            does not read (compressed index blocks).
        tf.errors.OpError: its files cannot be read or written.
    """
    from hbcore_tf.embedding.canonical import canonicalize
    from hbcore_tf._base.options import options

    canonicalize(path, int(options.emb_checkpoint_block_bytes))


def _remove_bundle(prefix: str) -> None:
    for name in tf.io.gfile.glob(prefix + ".*"):
        try:
            tf.io.gfile.remove(name)
        except tf.errors.OpError:
            pass


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
        True when the Saver holds sharded tables.
    """
    return getattr(saver, _COMPANION, None) is not None


class ShardedSaveError(RuntimeError):
    """A collective save of sharded tables failed on some rank."""


def collective_save(saver: Any, tf_save: Callable, sess: Any, save_path: str,
                    global_step: Any = None, *args: Any, **kwargs: Any
                    ) -> Optional[str]:
    """Saver.save with sharded tables at world size > 1 (the module
    docstring's protocol). Called on every rank.

    Args:
        saver: the user's tf.compat.v1.train.Saver (with a companion).
        tf_save: TF's unpatched Saver.save.
        sess, save_path, global_step, *args, **kwargs: Saver.save's.

    Returns:
        The checkpoint prefix written by rank 0, on every rank (None when
        the Saver's save returned None).

    Raises:
        ShardedSaveError: a rank failed to write its part, the ranks
            disagree on the prefix, or rank 0 failed to write or merge.
    """
    companion = getattr(saver, _COMPANION)
    path, step = _checkpoint_file(saver, sess, save_path, global_step)
    return collective_write(
        path, companion.tables,
        lambda part: companion.saver.save(sess, part, write_meta_graph=False,
                                          write_state=False),
        lambda: tf_save(saver, sess, save_path,
                        step if step is not None else global_step,
                        *args, **kwargs))


def collective_write(path: str, tables: List[str],
                     write_part: Callable[[str], Any],
                     write_main: Callable[[], Any]) -> Any:
    """Steps 2-5 of the protocol, for any writer. Called on every rank.

    Args:
        path: the checkpoint prefix (the same on every rank).
        tables: names of the sharded tables (for messages and the stall
            report).
        write_part: writes this rank's slices to the prefix it is given
            (run on ranks > 0).
        write_main: writes the checkpoint at ``path`` (run on rank 0).

    Returns:
        What ``write_main`` returned on rank 0, on every rank.

    Raises:
        ShardedSaveError: see collective_save.
    """
    import hbcore
    from hbcore_tf._base.context import context

    rank, size = context.rank, context.world_size
    tables = ",".join(tables)
    status = None
    if rank > 0:
        try:
            directory = os.path.dirname(path)
            if directory:
                tf.io.gfile.makedirs(directory)
            write_part(part_prefix(path, rank, size))
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            status = "%s: %s" % (type(exc).__name__, exc)
    try:
        gathered = hbcore.allgather_object(
            (path, status), name="hbcore.sharded_save[%s]" % tables)
    except Exception as exc:  # noqa: BLE001 - the stall shutdown, mostly
        raise ShardedSaveError(
            "collective save of sharded tables %s to %s did not complete: "
            "every rank must call save (a save on rank 0 alone waits here "
            "for the others): %s" % (tables, path, exc)) from exc
    problems = ["rank %d: %s" % (r, s) for r, (_, s) in enumerate(gathered)
                if s is not None]
    if len({p for p, _ in gathered}) != 1:
        problems.append("ranks disagree on the checkpoint prefix: %s" % (
            [p for p, _ in gathered]))
    result = None
    if not problems and rank == 0:
        try:
            value = write_main()
            merge_parts(path, [part_prefix(path, r, size)
                               for r in range(1, size)])
            write_canonical(path)
            result = ("ok", value)
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            result = ("error", "rank 0: %s: %s" % (type(exc).__name__, exc))
    if not problems:
        outcome, value = hbcore.broadcast_object(
            result, 0, name="hbcore.sharded_save_done[%s]" % tables)
        if outcome == "error":
            problems.append(value)
    if rank > 0:
        _remove_bundle(part_prefix(path, rank, size))  # only after a failure
    if problems:
        raise ShardedSaveError(
            "collective save of sharded tables %s to %s failed: %s" % (
                tables, path, "; ".join(problems)))
    return value


class _Companion:
    """The Saver of one rank's sharded state, built beside a user Saver."""

    def __init__(self, saver: Any, tables: List[str]) -> None:
        self.saver = saver
        self.tables = tables


# --- the patches ----------------------------------------------------------------

_tf_build = None
_tf_save = None


def _patched_build(self, checkpoint_path, build_save, build_restore):
    _tf_build(self, checkpoint_path, build_save, build_restore)
    if (getattr(self, "_hb_is_companion", False) or tf.executing_eagerly()
            or hasattr(self, _COMPANION)):
        return
    state = sharded_state(_saver_variables(self))
    if not state:
        return
    companion = _V1.train.Saver.__new__(_V1.train.Saver)
    companion._hb_is_companion = True
    with tf.name_scope("hb_sharded_save"):
        companion.__init__(var_list=state, sharded=False, allow_empty=True,
                           max_to_keep=None,
                           write_version=_V1.train.SaverDef.V2)
    object.__setattr__(self, _COMPANION,
                       _Companion(companion, _table_names(state)))


def _patched_save(self, sess, save_path, global_step=None, *args, **kwargs):
    if getattr(self, _COMPANION, None) is not None:
        from hbcore_tf._base.context import context

        if context.world_size > 1:
            return collective_save(self, _tf_save, sess, save_path,
                                   global_step, *args, **kwargs)
        path = _tf_save(self, sess, save_path, global_step, *args, **kwargs)
        if path is not None:
            write_canonical(path)
        return path
    return _tf_save(self, sess, save_path, global_step, *args, **kwargs)


_tf_object_save = None


def _patched_object_save(self, file_prefix, checkpoint_number=None,
                         session=None, options=None):
    # tf.train.Checkpoint's writer (TrackableSaver.save), eager only: the
    # sharded tables among the objects make the write collective.
    from hbcore_tf._base.context import context

    if (not tf.executing_eagerly() or not isinstance(file_prefix, str)
            or not any_sharded_tables()):
        return _tf_object_save(self, file_prefix, checkpoint_number,
                               session, options)
    serialized = self._gather_serialized_tensors(None)[0]
    from tensorflow.python.util import object_identity

    sharded = object_identity.ObjectIdentityDictionary()
    for obj, tensors in serialized.items():
        if obj is not None and shard_info(obj) is not None:
            sharded[obj] = tensors
    if not sharded:
        return _tf_object_save(self, file_prefix, checkpoint_number,
                               session, options)
    from tensorflow.python.checkpoint import functional_saver

    if context.world_size == 1:
        path = _tf_object_save(self, file_prefix, checkpoint_number,
                               session, options)
        write_canonical(_as_str(path))
        return path
    path = file_prefix
    if checkpoint_number:
        path = "%s-%d" % (file_prefix, int(checkpoint_number))
    return collective_write(
        path, _table_names(sharded),
        lambda part: functional_saver.MultiDeviceSaver(sharded).save(part),
        lambda: _tf_object_save(self, file_prefix, checkpoint_number,
                                session, options))


def _as_str(path: Any) -> str:
    """A checkpoint path as TrackableSaver.save returns it (a string, or
    an eager string tensor), as a str."""
    if isinstance(path, tf.Tensor):
        path = path.numpy()
    return path.decode() if isinstance(path, bytes) else str(path)


def install() -> None:
    """Installs the Saver patches (idempotent; see the module docstring)."""
    global _tf_build, _tf_save, _tf_object_save
    saver_class = _V1.train.Saver
    if _tf_build is not None:
        return
    from tensorflow.python.checkpoint import checkpoint as object_checkpoint

    _tf_build, _tf_save = saver_class._build, saver_class.save
    saver_class._build = _patched_build
    saver_class.save = _patched_save
    trackable_saver = object_checkpoint.TrackableSaver
    _tf_object_save = trackable_saver.save
    trackable_saver.save = _patched_object_save


def graph_has_sharded_tables(graph: Optional[Any] = None) -> bool:
    """Whether ``graph`` (default: the default graph) holds a sharded
    table among its global variables.

    Args:
        graph: a tf.Graph; None: the default graph.

    Returns:
        True when a global variable of ``graph`` is a sharded table's
        shard.
    """
    graph = graph or _V1.get_default_graph()
    with graph.as_default():
        return any(shard_info(v) is not None for v in _V1.global_variables())


# --- MonitoredTrainingSession -------------------------------------------------------

class _NullSummaryWriter:
    def add_graph(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_meta_graph(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_session_log(self, *args: Any, **kwargs: Any) -> None:
        pass


class CollectiveCheckpointSaverHook(_V1.train.CheckpointSaverHook):
    """CheckpointSaverHook run on EVERY rank of a graph with sharded tables
    (the save is collective); rank 0 alone writes the checkpoint, the
    graph and the summaries, and runs the listeners.

    With ``save_secs``, rank 0's timer decides and the decision is
    broadcast every step (one tiny collective), so all ranks save at the
    same step; ``save_steps`` needs no collective.

    Args:
        writer: whether this rank writes (rank 0); other arguments as
            tf.compat.v1.train.CheckpointSaverHook's.
    """

    def __init__(self, checkpoint_dir: str, writer: bool,
                 **kwargs: Any) -> None:
        if not writer:
            kwargs["listeners"] = None
        super().__init__(checkpoint_dir, **kwargs)
        self._hb_writer = writer
        self._hb_by_secs = kwargs.get("save_secs") is not None

    def begin(self) -> None:
        """Sets the hook up; a non-writer only reads the global step and
        gets a summary writer that writes nothing."""
        if self._hb_writer:
            super().begin()
            return
        self._summary_writer = _NullSummaryWriter()
        from tensorflow.python.training import training_util

        # What CheckpointSaverHook.begin reads the step with.
        self._global_step_tensor = (
            training_util._get_or_create_global_step_read())  # noqa: SLF001

    def after_create_session(self, session: Any, coord: Any) -> None:
        """Saves the initial checkpoint (collective: on every rank).

        The writer also writes the graph and meta graph, as
        CheckpointSaverHook does.

        Args:
            session: the session just created.
            coord: its coordinator (passed on by the writer only).
        """
        if self._hb_writer:
            super().after_create_session(session, coord)
            return
        step = session.run(self._global_step_tensor)
        self._save(session, step)
        self._timer.update_last_triggered_step(step)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        """Saves when due; with ``save_secs``, as rank 0's timer decides.

        Args:
            run_context: the step's SessionRunContext (its session saves;
                a listener may request a stop through it).
            run_values: the step's SessionRunValues (the global step read
                before the step; used without ``save_secs`` only).
        """
        if not self._hb_by_secs:
            super().after_run(run_context, run_values)
            return
        import hbcore

        step = run_context.session.run(self._global_step_tensor)
        due = (self._timer.should_trigger_for_step(step)
               if self._hb_writer else None)
        if hbcore.broadcast_object(due, 0, name="hbcore.checkpoint_due"):
            self._timer.update_last_triggered_step(step)
            if self._save(run_context.session, step):
                run_context.request_stop()


# --- export ----------------------------------------------------------------------

# mode -> (meta graph tag, signature key), as TF's export_utils maps Keras
# and Estimator mode keys (HybridBackend passes its modes through those).
_MODES = {"infer": ("serve", "serving_default"),
          "predict": ("serve", "serving_default"),
          "train": ("train", "train"),
          "eval": ("eval", "eval"),
          "test": ("eval", "eval")}
_ALL_MODES = ("predict", "train", "test")


def _check_modes(modes: Iterable[str]) -> List[str]:
    modes = list(modes)
    for mode in modes:
        if mode not in _MODES:
            raise ValueError("export: mode %r is not one of %s" % (
                mode, sorted(_MODES)))
    return modes


def _timestamped_dir(base: str) -> str:
    stamp = int(time.time())
    while True:
        path = os.path.join(base, str(stamp))
        if not tf.io.gfile.exists(path):
            return path
        stamp += 1


def export(export_dir_base: str, checkpoint_path: str,
           signature_def_fn: Callable[[], Any],
           assets_extra: Optional[Dict[str, str]] = None,
           as_text: bool = False, clear_devices: bool = True,
           strip_default_attrs: bool = True, mode: str = "infer") -> str:
    """Builds a SavedModel from a checkpoint (HybridBackend's
    ``hb.train.export``): the serving graph holds every table whole and
    its lookups are plain gathers, so it loads with stock TensorFlow
    (tf.saved_model.load, saved_model_cli) without hbcore or MPI.

    ``signature_def_fn`` builds the serving graph in a fresh graph with
    sharding turned off (tables made inside ``hb.embedding_scope`` are
    plain full-size variables) and returns its SignatureDef (or a dict of
    key -> SignatureDef); the variables are restored from
    ``checkpoint_path`` by name, and the graph's local variables and
    tables are initialized when the SavedModel is loaded. Only rank 0
    writes (it needs memory for the tables it exports); call it on every
    rank when hbcore runs with more than one rank, as every rank then
    waits for rank 0.

    Args:
        export_dir_base: the SavedModel goes to ``<base>/<timestamp>``.
        checkpoint_path: a checkpoint prefix, or a directory (its latest).
        signature_def_fn: builds the serving graph, returns its signature.
        assets_extra: destination (relative to assets.extra) -> source.
        as_text: write saved_model.pbtxt instead of .pb.
        clear_devices: drop device placements from the graph.
        strip_default_attrs: drop attributes at their default values.
        mode: 'infer' or 'predict' (tag serve, key serving_default),
            'eval' or 'test' (tag and key eval), 'train'.

    Returns:
        The export directory (on every rank).

    Raises:
        ValueError: unknown mode, or no checkpoint at ``checkpoint_path``.
    """
    tag, key = _MODES[_check_modes([mode])[0]]

    def build() -> tuple:
        signatures = signature_def_fn()
        if not isinstance(signatures, dict):
            signatures = {key: signatures}
        return signatures, None, [tag]

    return _export_collective(export_dir_base, checkpoint_path, build,
                              assets_extra, as_text, clear_devices,
                              strip_default_attrs)


def export_all(export_dir_base: str, checkpoint_path: str,
               signature_defs_and_main_op_fn: Callable[[], Any],
               assets_extra: Optional[Dict[str, str]] = None,
               as_text: bool = False, clear_devices: bool = True,
               strip_default_attrs: bool = True,
               modes: Optional[Iterable[str]] = None) -> str:
    """A SavedModel of several signatures from a checkpoint
    (HybridBackend's ``hb.saved_model.export_all``); as ``export``, with
    one meta graph tagged for every mode it serves.

    Args:
        export_dir_base, checkpoint_path, assets_extra, as_text,
            clear_devices, strip_default_attrs: as ``export``.
        signature_defs_and_main_op_fn: builds the graph; returns a dict
            signature key -> SignatureDef, or ``(that dict, main_op)``
            (main_op None: initialize local variables and tables).
        modes: the modes to export (default predict, train and test).
            The signatures kept are those whose key is one of these
            modes' keys (serving_default, train, eval); the meta graph
            gets the tags of the modes found.

    Returns:
        The export directory (on every rank).

    Raises:
        ValueError: unknown mode, none of the modes' signatures returned,
            or no checkpoint at ``checkpoint_path``.
    """
    modes = _check_modes(_ALL_MODES if modes is None else modes)

    def build() -> tuple:
        signatures, main_op = signature_defs_and_main_op_fn(), None
        if isinstance(signatures, (tuple, list)):
            if len(signatures) > 1:
                main_op = signatures[1]
            signatures = signatures[0]
        found = [m for m in modes if _MODES[m][1] in signatures]
        if not found:
            raise ValueError(
                "export_all: no signature for modes %s (keys %s; got %s)" % (
                    modes, sorted({_MODES[m][1] for m in modes}),
                    sorted(signatures)))
        keys = {_MODES[m][1] for m in found}
        tags = sorted({_MODES[m][0] for m in found})
        return ({k: v for k, v in signatures.items() if k in keys},
                main_op, tags)

    return _export_collective(export_dir_base, checkpoint_path, build,
                              assets_extra, as_text, clear_devices,
                              strip_default_attrs)


def _export_collective(export_dir_base, checkpoint_path, build,
                       assets_extra, as_text, clear_devices,
                       strip_default_attrs) -> str:
    """Rank 0 writes the export; every rank returns its directory or
    raises rank 0's error."""
    from hbcore_tf._base.context import context

    result = None
    if context.rank == 0:
        try:
            result = ("ok", _export_rank0(
                export_dir_base, checkpoint_path, build, assets_extra,
                as_text, clear_devices, strip_default_attrs))
        except Exception as exc:  # noqa: BLE001 - reported on every rank
            result = ("error", exc)
    if context.world_size > 1:
        import hbcore

        result = hbcore.broadcast_object(
            result if context.rank == 0 else None, 0, name="hbcore.export")
    outcome, value = result
    if outcome == "error":
        raise value
    return value


def _export_rank0(export_dir_base, checkpoint_path, build, assets_extra,
                  as_text, clear_devices, strip_default_attrs) -> str:
    from hbcore_tf.embedding.sharding import sharding_suspended

    if tf.io.gfile.isdir(checkpoint_path):
        found = _V1.train.latest_checkpoint(checkpoint_path)
        if found is None:
            raise ValueError("export: no checkpoint in %s" % checkpoint_path)
        checkpoint_path = found
    export_dir = _timestamped_dir(export_dir_base)
    tf.io.gfile.makedirs(export_dir_base)
    staging = tempfile.mkdtemp(prefix=".tmp-export-", dir=export_dir_base)
    shutil.rmtree(staging)
    with tf.Graph().as_default() as graph:
        with sharding_suspended():
            signatures, main_op, tags = build()
        if main_op is None:
            # As HybridBackend (and a MonitoredSession): local variables
            # and tables are initialized when the model is loaded.
            main_op = _V1.train.Scaffold.default_local_init_op()
        saver = _V1.train.Saver(sharded=True, allow_empty=True)
        with _V1.Session(graph=graph) as session:
            saver.restore(session, checkpoint_path)
            builder = _V1.saved_model.Builder(staging)
            builder.add_meta_graph_and_variables(
                session, tags, signature_def_map=signatures,
                assets_collection=_V1.get_collection(
                    _V1.GraphKeys.ASSET_FILEPATHS),
                main_op=main_op, clear_devices=clear_devices,
                strip_default_attrs=strip_default_attrs)
            builder.save(as_text=as_text)
    if assets_extra:
        extra = os.path.join(staging, "assets.extra")
        for dest, source in assets_extra.items():
            target = os.path.join(extra, dest)
            tf.io.gfile.makedirs(os.path.dirname(target))
            tf.io.gfile.copy(source, target, overwrite=True)
    tf.io.gfile.rename(staging, export_dir)
    return export_dir
