"""``hbcore_tf.keras.elastic``: Horovod's elastic Keras API.

``KerasState(model, optimizer=None, **kwargs)`` is hbcore_tf.elastic's
TensorFlowKerasState; the callbacks keep it current during ``model.fit``
as Horovod's do:

- ``CommitStateCallback(state, batches_per_commit=1)``: commits every
  ``batches_per_commit`` batches and at each epoch's end.
- ``UpdateBatchStateCallback(state)``: ``state.batch`` is the last batch
  done (0 after an epoch), and an epoch restarted after a reset runs only
  its remaining steps.
- ``UpdateEpochStateCallback(state)``: ``state.epoch`` counts the epochs
  done, across resets.

Each subclasses the Callback of the Keras in use (hbcore_tf._base.compat).
"""
from typing import Any, Dict, Optional

from hbcore_tf._base import compat as _compat
from hbcore_tf.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                               TensorFlowKerasState, run)

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run", "HorovodInternalError",
           "HostsUpdatedInterrupt"]

_Callback = _compat.callback_base()


class KerasState(TensorFlowKerasState):
    """Horovod's KerasState: TensorFlowKerasState for ``model.fit``.

    Args:
        model: The Keras model.
        optimizer: Its optimizer (default: ``model.optimizer``).
        backend: Accepted for Horovod's signature; unused.
        **kwargs: ObjectState values (Horovod's examples use epoch and
            batch, which the callbacks update).
    """


class CommitStateCallback(_Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the
    end of every epoch.

    Args:
        state: The elastic state.
        batches_per_commit: Batches between commits (>= 1).

    Raises:
        ValueError: If ``batches_per_commit`` < 1.
    """

    def __init__(self, state: Any, batches_per_commit: int = 1) -> None:
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError("batches_per_commit must be >= 1, got %r"
                             % (batches_per_commit,))
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs: Optional[Dict] = None) -> None:
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch: int, logs: Optional[Dict] = None) -> None:
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch: int, logs: Optional[Dict] = None) -> None:
        self.state.commit()


class UpdateBatchStateCallback(_Callback):
    """Keeps ``state.batch`` at the last batch done in the epoch.

    Args:
        state: The elastic state (with a ``batch`` value).
    """

    def __init__(self, state: Any) -> None:
        super().__init__()
        self.state = state
        self.steps_per_epoch: Optional[int] = None

    def on_train_begin(self, logs: Optional[Dict] = None) -> None:
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch: int, logs: Optional[Dict] = None) -> None:
        # An epoch restarted after a reset runs only its remaining steps.
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params["steps"]
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch: int, logs: Optional[Dict] = None) -> None:
        self.state.batch = batch

    def on_epoch_end(self, epoch: int, logs: Optional[Dict] = None) -> None:
        self.state.batch = 0


class UpdateEpochStateCallback(_Callback):
    """Keeps ``state.epoch`` at the number of epochs done, across resets
    (Keras counts each ``fit`` from 0).

    Args:
        state: The elastic state (with an ``epoch`` value).
    """

    def __init__(self, state: Any) -> None:
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs: Optional[Dict] = None) -> None:
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch: int, logs: Optional[Dict] = None) -> None:
        self.state.epoch = self.initial_epoch + epoch + 1
