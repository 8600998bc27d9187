"""Rank script: HB_BIND_RANKS binds each rank's threads at init and
restores their CPU sets at shutdown.

    hbrun -np N python rank_binding.py [CPUS_OF_RANK0 CPUS_OF_RANK1 ...]

With arguments, rank r first confines itself to the CPUs of its argument
("0+1": CPUs 0 and 1), as a launcher's binding would, before any other
thread exists. Then it starts two threads: one left as it is, one the
program pins to its last CPU. After init it starts a third thread and
reports the CPU sets of all of them, of the main thread and of the
background thread (named 'hbcore'); after shutdown, the sets again.
"""
import os
import sys

_ARGS = sys.argv[1:]
if _ARGS:  # before numpy or hbcore can start threads
    _RANK = int(os.environ["PMI_RANK"])  # hbrun runs MPICH's mpiexec
    os.sched_setaffinity(0, [int(c) for c in _ARGS[_RANK].split("+")])

import threading  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, report  # noqa: E402

import hbcore as hb  # noqa: E402


class Waiter:
    """A thread that records its thread id and waits to be released."""

    def __init__(self, pin_to_last_cpu: bool = False):
        self.ready = threading.Event()
        self.release = threading.Event()
        self.pin = pin_to_last_cpu
        self.tid = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(30)

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        if self.pin:
            os.sched_setaffinity(0, [max(os.sched_getaffinity(0))])
        self.ready.set()
        self.release.wait(60)

    def cpus(self):
        return sorted(os.sched_getaffinity(self.tid))


def background_tid() -> int:
    """The id of this process's thread named 'hbcore'."""
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                if f.read().strip() == "hbcore":
                    return int(tid)
        except OSError:  # the thread ended meanwhile
            continue
    raise AssertionError("no thread named hbcore")


def main() -> None:
    rank = env_rank()
    before = sorted(os.sched_getaffinity(0))
    plain, pinned = Waiter(), Waiter(pin_to_last_cpu=True)
    pinned_before = pinned.cpus()
    hb.init()
    later = Waiter()
    total = hb.allreduce(np.full(3, rank + 1, np.float32), op=hb.Sum)
    result = {
        "local_rank": hb.local_rank(), "local_size": hb.local_size(),
        "before": before, "pinned_before": pinned_before,
        "main": sorted(os.sched_getaffinity(0)), "plain": plain.cpus(),
        "pinned": pinned.cpus(), "later": later.cpus(),
        "background": sorted(os.sched_getaffinity(background_tid())),
        "sum": total.tolist()}
    # A rank that shuts down ends every rank's background thread: no rank
    # shuts down before all have read theirs.
    hb.barrier()
    hb.shutdown()
    result.update({"main_after": sorted(os.sched_getaffinity(0)),
                   "plain_after": plain.cpus(), "later_after": later.cpus(),
                   "pinned_after": pinned.cpus()})
    for waiter in (plain, pinned, later):
        waiter.release.set()
    report(result, rank)


if __name__ == "__main__":
    main()
