"""Functions for the hbcore.run tests (imported by reference on the ranks)."""
import os
import time


def rank_and_args(*args, **kwargs):
    """Returns this rank's PMI_RANK with the arguments it got."""
    return os.environ["PMI_RANK"], args, kwargs


def fail_on_rank(bad_rank):
    """Raises on ``bad_rank``; the other ranks wait (as in a collective)."""
    if int(os.environ["PMI_RANK"]) == bad_rank:
        raise ValueError("bad things on rank %d" % bad_rank)
    time.sleep(1000)


def kill_self_on_rank(bad_rank):
    """SIGKILLs ``bad_rank``; the other ranks wait."""
    import signal
    if int(os.environ["PMI_RANK"]) == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1000)


def raise_while_peer_waits(bad_rank):
    """``bad_rank`` raises while the other ranks wait for it in an
    allreduce, which then fails on them with a ShutdownError naming it.

    ``bad_rank`` then stays alive until the launcher stops it, so a peer's
    ShutdownError is always the first failure the launcher sees, though it
    is a consequence: an atexit handler registered before
    ``hbcore.init()`` runs after hbcore's own (which has told the peers),
    finalizes MPI (whose finalize at process exit would otherwise wait for
    this rank, and the peers could not exit) and waits.
    """
    import atexit
    rank = int(os.environ["PMI_RANK"])
    if rank == bad_rank:
        atexit.register(_finalize_mpi_and_wait)
    import numpy as np
    import hbcore
    hbcore.init()
    if rank == bad_rank:
        raise ValueError("root cause on rank %d" % bad_rank)
    hbcore.allreduce(np.ones(2, np.float32), name="never_matched")


def _finalize_mpi_and_wait():
    from mpi4py import MPI
    MPI.Finalize()
    time.sleep(1000)  # stopped by the launcher's first-failure teardown
