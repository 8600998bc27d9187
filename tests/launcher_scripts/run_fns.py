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


def raise_after_peer_is_killed(bad_rank, pid_dir):
    """``bad_rank`` writes its pid and SIGKILLs itself; the other ranks
    raise once it is gone (a peer's error that is the kill's consequence,
    as a collective's failure would be)."""
    import signal
    rank = int(os.environ["PMI_RANK"])
    path = os.path.join(pid_dir, "pid")
    if rank == bad_rank:
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                os.kill(int(f.read()), 0)
        except (FileNotFoundError, ProcessLookupError):
            if os.path.exists(path):
                raise ValueError("rank %d is gone" % bad_rank)
        time.sleep(0.01)
    raise TimeoutError("rank %d never went away" % bad_rank)


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
