"""``hb.train.MonitoredTrainingSession``: tf.compat.v1's, made data-parallel.

Every rank opens the session as TF's chief would (ChiefSessionCreator:
restore from ``checkpoint_dir`` when it holds a checkpoint, else run the
initializers); there is no non-chief path, because a non-chief TF session
waits for a chief in a shared gRPC cluster that hbcore does not use. Then:

1. a hook broadcasts every global variable (weights and optimizer slots,
   and those other hooks create in their begin(): the broadcast is built
   after them) from rank 0 right after the session is created, i.e. after
   the restore or the initialisation, before any other hook's
   after_create_session, so every rank starts from rank 0's values;
   once hbcore has shut down (a peer failed, the stall shutdown) it
   raises hbcore.ShutdownError (hbcore_tf._parallel.hooks says why);
2. checkpoints, summaries and the step counter are written by rank 0 only
   (on the other ranks the save/summary arguments are turned off; when the
   graph holds sharded embedding tables every rank runs the checkpoint
   saver, whose save is collective, and rank 0 writes), and
   ``chief_only_hooks`` run on rank 0 only; rank 0's checkpoint saver gets
   ``hb.context.saving_listeners``;
3. with ``eval_fn``, an hbcore_tf.train.evaluation.EvaluationHook runs it
   every ``eval_every_n_iter`` steps on every rank;
4. ``keep_checkpoint_max`` / ``keep_checkpoint_every_n_hours``
   (HybridBackend's arguments) configure the default saver of the
   scaffold, built on every rank, when the scaffold has none.
5. when the graph reads an hb.data iterator, ``should_stop()`` turns
   True on every rank after the step that took the last synchronized
   batch (hbcore_tf.data.detect_end), as HybridBackend's detect-end hook
   does, instead of the next step failing with OutOfRangeError.

Contract: every rank calls this with the same graph, so the broadcast
(one grouped collective) is built and run identically everywhere.
"""
from typing import Any, Callable, List, Optional

import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.context import context
from hbcore_tf.data.detect_end import DetectEndHook
from hbcore_tf._parallel.hooks import BroadcastGlobalVariablesHook
from hbcore_tf._patches import internals
from hbcore_tf.embedding.session_hook import CollectiveCheckpointSaverHook
from hbcore_tf.embedding.sharded_state import graph_has_sharded_tables

_USE_DEFAULT = object()


def _checkpoint_schedule(secs: Any, steps: Any) -> tuple:
    # tf.compat.v1.train.MonitoredTrainingSession's defaulting rule.
    if secs is _USE_DEFAULT and steps is _USE_DEFAULT:
        return 600, None
    if secs is _USE_DEFAULT:
        return None, steps
    if steps is _USE_DEFAULT:
        return secs, None
    return secs, steps


class _BroadcastFirstHook(BroadcastGlobalVariablesHook):
    """BroadcastGlobalVariablesHook(0) whose op is built by
    ``_BuildBroadcastHook`` (the last hook's begin()), so it covers the
    global variables other hooks create in their begin(); it still runs
    first in after_create_session."""

    def begin(self) -> None:
        """Builds nothing: _BuildBroadcastHook.begin() does."""

    def build(self) -> None:
        """Builds the broadcast of every global variable now."""
        BroadcastGlobalVariablesHook.begin(self)


class _BuildBroadcastHook(tf.compat.v1.train.SessionRunHook):
    """Last of the hooks: builds ``hook``'s broadcast in begin(), after
    every other hook's begin() (on every rank: the same graph).

    Args:
        hook: the _BroadcastFirstHook, first of the hooks.
    """

    def __init__(self, hook: _BroadcastFirstHook) -> None:
        self._hook = hook

    def begin(self) -> None:
        """Builds the broadcast op."""
        self._hook.build()


class _KeepCheckpointsHook(tf.compat.v1.train.SessionRunHook):
    """Gives the scaffold a default saver that keeps ``max_to_keep``
    checkpoints (and one every ``keep_checkpoint_every_n_hours``), as
    HybridBackend's keep_checkpoint_* arguments do; a scaffold with its
    own saver, or a graph with one in the SAVERS collection, keeps it.

    Built in begin() on every rank (the same graph everywhere), after
    every other hook's begin() created its variables, and before the
    scaffold is finalized.

    Args:
        scaffold: the session's Scaffold.
        max_to_keep: as tf.compat.v1.train.Saver's (None: TF's default).
        keep_checkpoint_every_n_hours: as Saver's (None: TF's default).
    """

    def __init__(self, scaffold: Any, max_to_keep: Optional[int],
                 keep_checkpoint_every_n_hours: Optional[float]) -> None:
        self._scaffold = scaffold
        self._kwargs = {}
        if max_to_keep is not None:
            self._kwargs["max_to_keep"] = max_to_keep
        if keep_checkpoint_every_n_hours is not None:
            self._kwargs["keep_checkpoint_every_n_hours"] = \
                keep_checkpoint_every_n_hours

    def begin(self) -> None:
        """Adds the saver to the SAVERS collection, where the scaffold's
        finalize() takes its default saver from."""
        key = tf.compat.v1.GraphKeys.SAVERS
        if self._scaffold.saver is not None or \
                tf.compat.v1.get_collection(key):
            return
        # What Scaffold.finalize builds by default, with the keep settings.
        tf.compat.v1.add_to_collection(key, tf.compat.v1.train.Saver(
            sharded=True, allow_empty=True, **self._kwargs))


# Called eagerly (a HybridBackend v1 script on TensorFlow 2, whose
# hb.function built its graph in the default graph), the session is built
# on the default graph, as in TensorFlow 1.
@_compat.in_default_graph_if_eager
def MonitoredTrainingSession(  # noqa: N802 - TF's name
        master: str = "", is_chief: bool = True,
        checkpoint_dir: Optional[str] = None, scaffold: Any = None,
        hooks: Optional[List[Any]] = None,
        chief_only_hooks: Optional[List[Any]] = None,
        save_checkpoint_secs: Any = _USE_DEFAULT,
        save_summaries_steps: Any = _USE_DEFAULT,
        save_summaries_secs: Any = _USE_DEFAULT, config: Any = None,
        stop_grace_period_secs: int = 120, log_step_count_steps: int = 100,
        max_wait_secs: int = 7200, save_checkpoint_steps: Any = _USE_DEFAULT,
        summary_dir: Optional[str] = None, save_graph_def: bool = True,
        eval_every_n_iter: Optional[int] = None,
        eval_fn: Optional[Callable[[], Any]] = None,
        eval_steps: Optional[int] = 100, eval_history: Optional[list] = None,
        keep_checkpoint_max: Optional[int] = None,
        keep_checkpoint_every_n_hours: Optional[float] = None
) -> tf.compat.v1.train.MonitoredSession:
    """tf.compat.v1.train.MonitoredTrainingSession for data-parallel
    training (see the module docstring). Takes every argument of TF's.

    Args:
        master, config, stop_grace_period_secs, max_wait_secs, scaffold,
        hooks, save_summaries_steps, save_summaries_secs,
        log_step_count_steps, summary_dir, save_graph_def,
        save_checkpoint_secs, save_checkpoint_steps: as TF's.
        is_chief: this process may write checkpoints and summaries; it
            does only when it is also rank 0 (default True everywhere).
        checkpoint_dir: restored by EVERY rank; written by rank 0.
        chief_only_hooks: hooks run on rank 0 only.
        eval_every_n_iter: evaluate every this many steps (default 1000).
        eval_fn: builds the evaluation metrics (see EvaluationHook).
        eval_steps: evaluation steps per evaluation (None: until the
            evaluation data runs out).
        eval_history: a list that receives each evaluation's values.
        keep_checkpoint_max: checkpoints to keep (HybridBackend's
            argument; None: TF's default, 5), when the scaffold has no
            saver of its own.
        keep_checkpoint_every_n_hours: also keep one checkpoint every this
            many hours (HybridBackend's argument; None: TF's default).

    Returns:
        A MonitoredSession.

    Raises:
        ValueError: eval_every_n_iter is given without eval_fn.
    """
    if eval_every_n_iter is not None and eval_fn is None:
        raise ValueError("MonitoredTrainingSession: eval_every_n_iter is "
                         "given but eval_fn is None")
    writer = bool(is_chief) and context.is_chief
    scaffold = scaffold or tf.compat.v1.train.Scaffold()
    broadcast = _BroadcastFirstHook(0)
    # First, so its begin() sees only the training graph's data-sync
    # iterator, not one an EvaluationHook builds in its own begin().
    all_hooks = [DetectEndHook(), broadcast] + list(hooks or [])
    secs, steps = _checkpoint_schedule(save_checkpoint_secs,
                                       save_checkpoint_steps)
    if writer:
        all_hooks += list(chief_only_hooks or [])
    if checkpoint_dir and (secs or steps):
        if graph_has_sharded_tables() and context.world_size > 1:
            # Saving sharded tables is collective: every rank saves, rank
            # 0 writes (hbcore_tf.embedding.save_protocol).
            all_hooks.append(CollectiveCheckpointSaverHook(
                checkpoint_dir, writer=context.is_chief, save_secs=secs,
                save_steps=steps, scaffold=scaffold,
                listeners=context.saving_listeners,
                save_graph_def=save_graph_def))
        elif writer:
            all_hooks.append(tf.compat.v1.train.CheckpointSaverHook(
                checkpoint_dir, save_secs=secs, save_steps=steps,
                scaffold=scaffold, listeners=context.saving_listeners,
                save_graph_def=save_graph_def))
    if eval_fn is not None:
        # Looked up at use, as hb.train.EvaluationHook (hbcore_tf/train/
        # __init__.py): the session's tests stand a stub module in for it.
        from hbcore_tf.train.evaluation import EvaluationHook

        all_hooks.append(EvaluationHook(
            eval_fn, steps=eval_steps,
            every_n_iter=1000 if eval_every_n_iter is None
            else eval_every_n_iter,
            summary_dir=(summary_dir or checkpoint_dir) if writer else None,
            history=eval_history))
    if keep_checkpoint_max is not None or \
            keep_checkpoint_every_n_hours is not None:
        # Last: after every hook whose begin() may create variables.
        all_hooks.append(_KeepCheckpointsHook(
            scaffold, keep_checkpoint_max, keep_checkpoint_every_n_hours))
    all_hooks.append(_BuildBroadcastHook(broadcast))
    off = {} if writer else {
        "save_summaries_steps": None, "save_summaries_secs": None,
        "log_step_count_steps": None}
    summaries = {"save_summaries_steps": save_summaries_steps,
                 "save_summaries_secs": save_summaries_secs,
                 "log_step_count_steps": log_step_count_steps}
    summaries.update(off)
    kwargs = {k: v for k, v in summaries.items() if v is not _USE_DEFAULT}
    # TF's own function, from its defining module: inside hb.scope the
    # public tf.compat.v1.train name is this function (hbcore_tf.scope).
    return internals.MONITORED_TRAINING_SESSION.load()(
        master=master, is_chief=True, checkpoint_dir=checkpoint_dir,
        scaffold=scaffold, hooks=all_hooks, chief_only_hooks=None,
        save_checkpoint_secs=None, save_checkpoint_steps=None,
        config=config, stop_grace_period_secs=stop_grace_period_secs,
        max_wait_secs=max_wait_secs,
        summary_dir=summary_dir if writer else None,
        save_graph_def=save_graph_def, **kwargs)
