"""Functions the Spark and Ray tests run on hosted ranks (imported by
reference on the ranks, from the driver's sys.path)."""
import os
import sys

import numpy as np

RANK_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "rank_scripts")


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


def elastic_job():
    """rank_scripts/elastic_train.py's numpy job (test_elastic.py's
    trainer, events from HB_TEST_EVENTS) on an elastic hosted rank."""
    if RANK_SCRIPTS not in sys.path:
        sys.path.insert(0, RANK_SCRIPTS)
    import elastic_train
    return elastic_train.job()
