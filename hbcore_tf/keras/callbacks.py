"""Keras callbacks of horovod.tensorflow.keras, for Keras 3 and tf_keras.

The classes subclass the Callback of the Keras ``tf.keras`` resolves to
(tf_keras when TF_USE_LEGACY_KERAS=1, Keras 3 otherwise; see
hbcore_tf._base.compat).

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1 * hvd.size(),
                                                 warmup_epochs=3),
    ]
"""
from typing import Any, Callable, Dict, Optional, Union

import tensorflow as tf

from hbcore_tf._base import compat as _compat
from hbcore_tf._base.rank_local import is_rank_local
from hbcore_tf.functions import allgather_object, broadcast_variables
from hbcore_tf.mpi_ops import Average, grouped_allreduce, rank, size
from hbcore_tf.process_sets import ProcessSet, global_process_set

_Callback = _compat.callback_base()


class BroadcastGlobalVariablesCallback(_Callback):
    """Broadcasts the model's and the optimizer's variables from
    ``root_rank`` to every other rank, so that all ranks start from the
    same state (random initialisation or a checkpoint restored on the root
    only).

    It broadcasts when training begins, if every rank holds the same
    variables then, and at the end of the first batch (Horovod's moment:
    the model's weights and every optimizer slot exist by then, even for a
    model built at its first call, such as a Sequential without an input
    shape). Put it first in the callback list.

    Cross-rank contract: each broadcast is preceded by one small allgather
    of every rank's variable shapes and dtypes, which every rank runs
    whatever it holds, and every rank decides from the same gathered list
    whether to broadcast. So a broadcast is submitted by all ranks or by
    none, even when the variables exist on some ranks only (e.g. an
    optimizer restored on the root only).

    Args:
        root_rank: the rank whose values everyone receives (a global rank,
            a member of ``process_set``).
        device: device for the broadcasts (default: the ops' placement).
        local_variables: a variable or a collection of variables (tf or
            Keras 3) that keep each rank's own value (model-parallel
            weights): they are not broadcast. More can be added with
            ``register_local_var``.
        process_set: broadcast among its members only (an hbcore
            extension; Horovod's callback always uses every rank). On a
            rank outside the set the callback does nothing.

    Raises:
        ValueError: ``local_variables`` holds something that is not a
            variable (Horovod's message).
    """

    def __init__(self, root_rank: int, device: str = "",
                 local_variables: Any = None,
                 process_set: ProcessSet = global_process_set) -> None:
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.broadcast_done = False
        # variable_key -> variable (kept alive so that its id stays its own)
        self._local_vars: Dict[int, Any] = {}
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        else:
            local_variables = list(local_variables)
            if not all(_is_variable(var) for var in local_variables):
                raise ValueError(
                    "All local variables must be of tf.Variable type.")
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var: Any) -> None:
        """Registers ``var`` as local to this rank: the callback does not
        broadcast it.

        Args:
            var: a tf.Variable or a Keras 3 variable.

        Raises:
            ValueError: ``var`` is not a variable.
        """
        if not _is_variable(var):
            raise ValueError("All local variables must be of tf.Variable "
                             "type.")
        self._local_vars[_compat.variable_key(var)] = var

    def _variables(self) -> list:
        variables = list(_compat.model_variables(self.model))
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            variables += _compat.optimizer_variables(optimizer)
        seen, out = set(), []
        for var in variables:
            var = _compat.unwrap_variable(var)
            if is_rank_local(var):  # a table's block or its slot
                continue
            if id(var) in self._local_vars:  # registered as local
                continue
            if id(var) not in seen:
                seen.add(id(var))
                out.append(var)
        return out

    def _broadcast(self, required: bool) -> bool:
        """Broadcasts the variables if every rank holds the same list.

        Args:
            required: raise when the ranks' variables differ (after the
                first batch they must agree); otherwise skip quietly.

        Returns:
            Whether the variables were broadcast.

        Raises:
            ValueError: ``required`` and the ranks hold different
                variables (raised on every rank alike).
        """
        if not self.process_set.included():
            return False
        variables = self._variables()
        signature = [(tuple(var.shape.as_list()),
                      tf.as_dtype(var.dtype).base_dtype.name)
                     for var in variables]
        signatures = allgather_object(signature,
                                      process_set=self.process_set)
        if any(other != signatures[0] for other in signatures):
            if not required:
                return False
            counts = ", ".join("rank %d: %d" % (r, len(s))
                               for r, s in enumerate(signatures))
            raise ValueError(
                "BroadcastGlobalVariablesCallback: the ranks hold different "
                "model/optimizer variables after the first batch (variables "
                "per rank: %s); every rank must build the same model and "
                "optimizer" % counts)
        if not variables:
            return False
        with tf.device(self.device):
            if tf.executing_eagerly():
                broadcast_variables(variables, root_rank=self.root_rank,
                                    process_set=self.process_set)
            else:  # tf_keras in a v1 graph: run it in Keras' session
                op = broadcast_variables(variables, root_rank=self.root_rank,
                                         process_set=self.process_set)
                _compat.keras_session().run(op)
        return True

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        """Broadcasts the variables if every rank already holds the same
        ones (skips quietly otherwise).

        Args:
            logs: unused.
        """
        self._broadcast(required=False)

    def on_batch_end(self, batch: int,
                     logs: Optional[Dict[str, Any]] = None) -> None:
        """After the first batch only: broadcasts the variables (slots
        included).

        Args:
            batch: index of the batch that ended (unused).
            logs: unused.

        Raises:
            ValueError: the ranks hold different model/optimizer variables.
        """
        if self.broadcast_done:
            return
        self._broadcast(required=True)
        self.broadcast_done = True


def _is_variable(value: Any) -> bool:
    """A tf.Variable, or a Keras 3 variable (which holds one)."""
    return isinstance(_compat.unwrap_variable(value), tf.Variable)


class MetricAverageCallback(_Callback):
    """Averages the epoch's metrics (``logs``: loss, accuracy, val_*) over
    all ranks at the end of every epoch, in one fused allreduce, so that
    callbacks after it (checkpointing, early stopping, logging) see global
    values. Put it before those callbacks.

    Args:
        device: device for the allreduce (default: the op's placement).
        process_set: average over its members only (an hbcore extension;
            Horovod's callback always uses every rank). On a rank outside
            the set the callback leaves the logs alone.
    """

    def __init__(self, device: str = "",
                 process_set: ProcessSet = global_process_set) -> None:
        super().__init__()
        self.device = device
        self.process_set = process_set
        # Graph mode (tf_keras with eager execution disabled): the
        # placeholders and the allreduce built for a set of metric names,
        # built once (every rank builds them at the same epoch end, for the
        # same names) and run in Keras' session at every epoch end.
        self._graph_ops: Dict[Any, Any] = {}

    def _average_metrics_in_place(self, logs: Optional[Dict[str, Any]]) -> None:
        if not logs or not self.process_set.included():
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        if not keys:
            return
        local = [float(_scalar(logs[k])) for k in keys]
        if tf.executing_eagerly():
            reduced = self._allreduce(
                [tf.constant(v, tf.float64) for v in local])
            averaged = [float(value.numpy()) for value in reduced]
        else:
            averaged = self._average_in_session(tuple(keys), local)
        for key, value in zip(keys, averaged):
            logs[key] = value

    def _allreduce(self, values: Any) -> Any:
        with tf.device(self.device):
            return grouped_allreduce(values, op=Average,
                                     name="MetricAverageCallback",
                                     process_set=self.process_set)

    def _average_in_session(self, keys: Any, local: Any) -> Any:
        session = _compat.keras_session()
        built = self._graph_ops.get((keys, session.graph))
        if built is None:
            with session.graph.as_default():
                inputs = [tf.compat.v1.placeholder(tf.float64, [])
                          for _ in keys]
                outputs = self._allreduce(inputs)
            built = (inputs, outputs)
            self._graph_ops[(keys, session.graph)] = built
        inputs, outputs = built
        return [float(v) for v in session.run(
            outputs, feed_dict=dict(zip(inputs, local)))]

    def on_epoch_end(self, epoch: int,
                     logs: Optional[Dict[str, Any]] = None) -> None:
        """Replaces the numeric entries of ``logs`` by their average over
        the process set's ranks.

        Args:
            epoch: index of the epoch that ended (unused).
            logs: the epoch's metrics, updated in place.
        """
        self._average_metrics_in_place(logs)


def _scalar(value: Any) -> Any:
    if hasattr(value, "numpy"):
        value = value.numpy()
    return value


def _is_number(value: Any) -> bool:
    value = _scalar(value)
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    shape = getattr(value, "shape", ())
    return shape in ((), (1,))


def _scale_momentum_buffers(optimizer: Any, ratio: float) -> None:
    """Multiplies the optimizer's momentum buffers by ``ratio`` (eagerly,
    or in Keras' session through its cached assign ops in a v1 graph, so
    that no op is added per batch)."""
    buffers = _compat.momentum_buffers(optimizer)
    if tf.executing_eagerly():
        for buffer in buffers:
            buffer = _compat.unwrap_variable(buffer)
            buffer.assign(buffer * tf.cast(ratio, buffer.dtype))
        return
    if not buffers:
        return
    backend = _compat.keras_module().backend
    values = backend.batch_get_value(buffers)
    backend.batch_set_value([(buffer, value * ratio)
                             for buffer, value in zip(buffers, values)])


class LearningRateScheduleCallback(_Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` between
    ``start_epoch`` and ``end_epoch``.

    With ``staircase=True`` the rate changes at the first batch of each
    epoch (``multiplier(epoch)`` with an integer epoch); otherwise at every
    batch, with the fractional epoch ``epoch + batch / steps_per_epoch``.
    A constant ``multiplier`` m is an exponential decay, as in Horovod:
    the rate is ``initial_lr * m ** (epoch - start_epoch)``.

    With ``momentum_correction`` (Goyal et al.), a change of the rate from
    old to new scales the optimizer's momentum buffers by new/old, as if
    the momentum had been multiplied by that ratio for one step (Horovod's
    method); this also works when the momentum is compiled into Keras 3's
    train step.

    Works eagerly (Keras 3, tf_keras) and in a tf.compat.v1 graph (tf_keras
    with eager execution disabled), where the rate and the buffers are
    read and set in Keras' session.

    Args:
        initial_lr: the base learning rate (often lr * hvd.size()).
        multiplier: a number m (the rate is initial_lr * m ** (epoch -
            start_epoch)), or a function of the (fractional) epoch.
        start_epoch: first epoch the schedule applies to.
        end_epoch: the epoch it stops at (exclusive); None: never.
        staircase: adjust once per epoch (True) or every batch.
        momentum_correction: scale momentum buffers on changes.
        steps_per_epoch: batches per epoch; autodetected from model.fit's
            ``steps`` when None (or 0).

    Raises:
        ValueError: ``initial_lr`` is None (Horovod's message); when
            training begins, steps_per_epoch is needed but cannot be
            detected.
    """

    def __init__(self, initial_lr: float,
                 multiplier: Union[float, Callable[[float], float]],
                 start_epoch: int = 0, end_epoch: Optional[int] = None,
                 staircase: bool = True, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None) -> None:
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch: Optional[int] = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            base = float(multiplier)
            self.multiplier = lambda epoch: base ** (epoch - start_epoch)
        if self.initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")

    def _autodetect_steps_per_epoch(self) -> int:
        params = getattr(self, "params", None) or {}
        if params.get("steps"):
            return int(params["steps"])
        if params.get("samples") and params.get("batch_size"):
            return -(-int(params["samples"]) // int(params["batch_size"]))
        raise ValueError(
            "could not autodetect the number of steps per epoch; pass "
            "steps_per_epoch to %s" % type(self).__name__)

    def _in_range(self, epoch: int) -> bool:
        return epoch >= self.start_epoch and (
            self.end_epoch is None or epoch < self.end_epoch)

    def _adjust_learning_rate(self, epoch: float) -> float:
        optimizer = self.model.optimizer
        old_lr = _compat.get_learning_rate(optimizer)
        new_lr = float(self.initial_lr * self.multiplier(epoch))
        _compat.set_learning_rate(optimizer, new_lr)
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            _scale_momentum_buffers(optimizer, new_lr / old_lr)
        return new_lr

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        """Autodetects steps_per_epoch when a per-batch schedule needs it.

        Args:
            logs: unused.

        Raises:
            ValueError: steps_per_epoch is needed but cannot be detected.
        """
        if not self.steps_per_epoch and not self.staircase:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch: int,
                       logs: Optional[Dict[str, Any]] = None) -> None:
        """Records ``epoch`` as the current epoch for the batch hooks.

        Args:
            epoch: index of the epoch that begins.
            logs: unused.
        """
        self.current_epoch = epoch

    def on_batch_begin(self, batch: int,
                       logs: Optional[Dict[str, Any]] = None) -> None:
        """Sets the learning rate for this batch when the current epoch is
        in [start_epoch, end_epoch): at batch 0 with ``staircase``, at
        every batch otherwise.

        Args:
            batch: index of the batch within the epoch.
            logs: unused.
        """
        if self.current_epoch is None or not self._in_range(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust_learning_rate(self.current_epoch)
        else:
            self._adjust_learning_rate(
                self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch: int,
                     logs: Optional[Dict[str, Any]] = None) -> None:
        """Records the optimizer's learning rate as ``logs["lr"]`` (not
        for a learning-rate schedule).

        Args:
            epoch: index of the epoch that ended (unused).
            logs: the epoch's logs, updated in place (None: nothing done).
        """
        if logs is not None:
            try:
                logs["lr"] = _compat.get_learning_rate(self.model.optimizer)
            except TypeError:  # a schedule: nothing to report
                pass


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from ``initial_lr / size`` to ``initial_lr``
    over ``warmup_epochs`` epochs, batch by batch (Goyal et al., "Accurate,
    Large Minibatch SGD"), as Horovod does: at fractional epoch ``e`` the
    rate is ``initial_lr / size * (e' * (size - 1) / warmup_epochs + 1)``
    with ``e' = e + 1 / steps_per_epoch``, so it reaches ``initial_lr``
    exactly at the end of the warmup.

    Args:
        initial_lr: the rate after warmup (typically lr * hvd.size()).
        warmup_epochs: number of warmup epochs.
        momentum_correction: scale momentum buffers on changes.
        steps_per_epoch: batches per epoch; autodetected when None.
        verbose: 1: rank 0 prints a line when warmup ends.

    Raises:
        ValueError: ``initial_lr`` is None.
    """

    def __init__(self, initial_lr: float, warmup_epochs: int = 5,
                 momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None,
                 verbose: int = 0) -> None:
        def multiplier(epoch: float) -> float:
            # Shifted so that the last batch of an epoch gets a round value.
            epoch += 1.0 / self.steps_per_epoch
            n = size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0,
                         end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch: int,
                     logs: Optional[Dict[str, Any]] = None) -> None:
        """Records ``logs["lr"]`` and, with ``verbose``, prints a line on
        rank 0 after the last warmup epoch.

        Args:
            epoch: index of the epoch that ended.
            logs: the epoch's logs, updated in place.
        """
        super().on_epoch_end(epoch, logs)
        if (epoch == self.warmup_epochs - 1 and self.verbose > 0
                and rank() == 0):
            print("\nEpoch %d: finished gradual learning rate warmup to %g." % (
                epoch + 1, _compat.get_learning_rate(self.model.optimizer)))


class BestModelCheckpoint(_compat.keras_module().callbacks.ModelCheckpoint):
    """A ModelCheckpoint that keeps only the best model (``save_best_only``
    is always True) and whose ``filepath`` is set after construction (as
    Horovod's Spark estimators do): assign ``callback.filepath`` before
    training.

    Args:
        monitor: the logged quantity to monitor.
        verbose: 1 logs each save.
        save_weights_only: save the weights only (with Keras 3 the
            filepath must then end in ``.weights.h5``).
        mode: "auto", "min" or "max".
        save_freq: "epoch" or a number of batches.

    Raises:
        ValueError: (when training begins) ``filepath`` was not set.
    """

    def __init__(self, monitor: str = "val_loss", verbose: int = 0,
                 save_weights_only: bool = False, mode: str = "auto",
                 save_freq: Union[str, int] = "epoch") -> None:
        # Keras 3 checks the filepath's extension at construction: build
        # with a valid placeholder, then leave the filepath unset.
        placeholder = ("best.weights.h5" if save_weights_only
                       else "best.keras")
        super().__init__(filepath=placeholder, monitor=monitor,
                         verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        self.filepath = None

    def on_train_begin(self, logs: Optional[Dict[str, Any]] = None) -> None:
        """Checks that ``filepath`` was set.

        Args:
            logs: passed to ModelCheckpoint.

        Raises:
            ValueError: ``filepath`` is None.
        """
        if self.filepath is None:
            raise ValueError("BestModelCheckpoint.filepath is not set; "
                             "assign the path to save the best model to "
                             "before training")
        super().on_train_begin(logs)
