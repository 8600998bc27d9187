"""Functions the Spark and Ray tests run on hosted ranks (imported by
reference on the ranks, from the driver's sys.path)."""
import os

import numpy as np


def rank_data(rank, scale):
    """This rank's input: rank-seeded, computed alike by the test."""
    return np.random.RandomState(100 + rank).standard_normal(7) * scale


def train_step(scale):
    """One data-parallel step: the average of the ranks' gradients, and
    what every rank knows about the job."""
    import hbcore
    hbcore.init()
    grad = rank_data(hbcore.rank(), scale)
    average = hbcore.allreduce(grad, average=True, name="grad")
    names = hbcore.allgather_object("rank-%d" % hbcore.rank())
    return {"rank": hbcore.rank(), "size": hbcore.size(),
            "average": average, "names": names,
            "pid": os.getpid()}


def fail_on_rank(bad_rank):
    """Raises on ``bad_rank`` while the others wait for it in a
    collective (so only the teardown can free them)."""
    import hbcore
    hbcore.init()
    if hbcore.rank() == bad_rank:
        raise ValueError("bad shard on rank %d" % bad_rank)
    hbcore.allreduce(np.ones(3), name="never-complete")
    return "unreachable"


class Counter:
    """An executable object for RayExecutor.start(executable_cls)."""

    def __init__(self, start):
        self.count = start

    def bump(self):
        self.count += 1
        return self.count


def bump(counter):
    """execute(fn)'s function: state that lives across calls."""
    import hbcore
    return (hbcore.rank(), counter.bump(), os.getpid())


def import_engine(name):
    """Imports Spark or Ray for a test module (skipped where the extra is
    not installed: CI installs both with ".[test]"), then the hbcore under
    test."""
    import pytest
    from hbcore_path import import_hbcore_package
    module = pytest.importorskip(name, reason="needs hbcore's extra for "
                                 + name)
    import_hbcore_package()
    return module


def rank_python_path():
    """PYTHONPATH for Spark's and Ray's workers: the hbcore under test and
    this directory (the workers import hbcore and these functions)."""
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from under_test import import_paths
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(import_paths() + [here] + ([old] if old else []))


def hosted_processes():
    """Processes of hosted ranks still alive on this machine (proxies and
    ranks carry their host's key in the environment)."""
    import psutil
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "HB_RANK_HOST_KEY" in proc.environ():
                found.append((proc.pid, proc.info["cmdline"]))
        except psutil.Error:
            pass
    return found


def kill_rank(bad_rank):
    """SIGKILLs ``bad_rank`` (no error outcome, no traceback) while the
    others wait for it in a collective."""
    import signal
    import hbcore
    hbcore.init()
    if hbcore.rank() == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    hbcore.allreduce(np.ones(3), name="never-complete")
    return "unreachable"
