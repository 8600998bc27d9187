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
