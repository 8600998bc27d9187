"""Autotune (``HB_AUTOTUNE=1``, ``hbrun --autotune``; Horovod's
``HOROVOD_AUTOTUNE``): the runtime finds its fusion threshold, cycle time,
response cache and data-plane switches while the job trains.

The core (csrc/core/src/runtime/autotune.h) measures each sample on rank 0 and
applies the parameters on every rank at the same cycle; rank 0's tuner
thread (:mod:`hbcore.autotune.runner`, started by :func:`hbcore.init`)
chooses them with scikit-learn's Gaussian process
(:mod:`hbcore.autotune.optimizer`). :func:`plot` draws a log;
``python -m hbcore.autotune LOG --png OUT`` does the same from a shell.
docs/configuration.md ("Autotune") says how to read and pin the result.
"""
from hbcore.autotune.log import COLUMNS, read_log
from hbcore.autotune.plot import plot

__all__ = ["COLUMNS", "plot", "read_log"]
