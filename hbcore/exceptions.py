"""Exception types raised by hbcore.

Every status code the native core reports (``hb_status_code`` in
csrc/core/include/hbcore/c_api.h) maps onto exactly one class here; the one
table lives in csrc/python/module.cc (RaiseFor), which also stores the code
on the instance as ``status``. The TensorFlow op library maps the same codes
onto TF's types in its own table; hbcore_tf, like Horovod, raises
``tf.errors.FailedPreconditionError`` for a mismatch and
``tf.errors.InvalidArgumentError`` for an invalid argument.
"""
from typing import Optional


class HbcoreError(RuntimeError):
    """Base class of every error raised by the hbcore runtime.

    Attributes:
        status: the core's status code (``hb_status_code``; compare with
            ``hbcore._native.core.HB_ERR_*``) when the core reported the
            error, else None.
    """

    status: Optional[int] = None


# Horovod's name for a failure of the runtime; kept so ``except`` clauses
# written for Horovod keep working.
HorovodInternalError = HbcoreError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's: the job's hosts changed; raised by an elastic state's
    ``commit()`` / ``check_host_updates()`` on every rank at once
    (hbcore/elastic/state.py). ``hvd.elastic.run`` answers it by moving to
    the new hosts from the current state, with no rollback.

    Args:
        skip_sync: Whether the state need not be synchronised afterwards
            (Horovod: only hosts were removed). hbcore always starts a new
            world, so it always synchronises; the flag is kept for
            Horovod's handlers.
    """

    def __init__(self, skip_sync: bool) -> None:
        super().__init__("the hosts of the elastic job changed")
        self.skip_sync = skip_sync


class InvalidArgumentError(HbcoreError, ValueError):
    """A request was malformed on this rank (shape, root, splits, dtype).

    Raised locally, before any communication.
    """


class DuplicateNameError(InvalidArgumentError):
    """A tensor with the same name is already in flight on this rank."""


class ConfigError(InvalidArgumentError):
    """An HB_* / HOROVOD_* environment variable has an invalid value."""


class NotInitializedError(HbcoreError, ValueError):
    """hbcore was used before ``hbcore.init()``."""


NOT_INITIALIZED = "hbcore has not been initialized; use hbcore.init()."


def initialized(value: int) -> int:
    """Checks a number the core reports (a rank, a size), which is -1
    before ``init()``.

    Args:
        value: The core's answer.

    Returns:
        ``value``.

    Raises:
        NotInitializedError: ``value`` is negative.
    """
    if value < 0:
        raise NotInitializedError(NOT_INITIALIZED)
    return value


class MismatchError(HbcoreError):
    """Ranks disagreed about a tensor (op, dtype, shape, root, reduce op,
    scale factors). Raised on every rank; the runtime keeps working."""


class ShutdownError(HbcoreError):
    """The runtime shut down (on this or another rank, or after a stall);
    the message says where the first failure happened."""


class WaitTimeoutError(HbcoreError, TimeoutError):
    """``Handle.wait(timeout=...)`` / ``synchronize(handle, timeout=...)``
    ran out of time. Raised by the Python front end, not by the core: the
    operation is not cancelled, and a later wait or synchronize returns its
    result (or its error)."""


class UnsupportedError(HbcoreError, NotImplementedError):
    """A valid request this build cannot serve (e.g. Adasum, GPU buffers
    without a GPU backend)."""


class WorldMismatchError(HbcoreError):
    """``init()`` found this process alone in its MPI world while its
    environment (``TF_CONFIG``, Slurm, another MPI launcher's variables)
    says the job has several processes, so each would train apart. Raised
    by the Python front end after it shut the runtime down again; the
    message says how to launch instead. ``HB_IGNORE_TF_CONFIG=1`` switches
    the check off."""


class InternalError(HbcoreError):
    """MPI failed or an internal invariant broke."""
