"""Rank script: HB_THREAD_AFFINITY pins the background thread.

    HB_THREAD_AFFINITY=... hbrun -np N python thread_affinity.py

Reports the result of init (the error's type and message if it failed)
and, after a successful init, the CPU set of the thread named 'hbcore'
(the background thread) and of the main thread.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, exc_info, report  # noqa: E402

import hbcore as hb  # noqa: E402


def thread_names():
    """{tid: name} of this process's threads."""
    names = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names[int(tid)] = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
    return names


def background_thread_cpus():
    """The CPU set of this process's thread named 'hbcore' (the background
    thread names itself as it starts; the wait is bounded)."""
    deadline = time.monotonic() + 10
    while True:
        names = thread_names()
        found = [tid for tid, name in names.items() if name == "hbcore"]
        if len(found) == 1:
            return sorted(os.sched_getaffinity(found[0]))
        if time.monotonic() > deadline:
            raise AssertionError("not one thread named hbcore: %s" % names)
        time.sleep(0.01)


def main() -> None:
    rank = env_rank()
    try:
        hb.init()
    except Exception as exc:  # noqa: BLE001 - the error is the result
        report({"init": "failed", "error": exc_info(exc)}, rank)
        return
    total = hb.allreduce(np.ones(2, np.float32), op=hb.Sum)  # it runs
    result = {"init": "ok", "local_rank": hb.local_rank(),
              "background_cpus": background_thread_cpus(),
              "main_cpus": sorted(os.sched_getaffinity(0)),
              "sum": total.tolist()}
    # A rank that shuts down ends every rank's background thread: no rank
    # shuts down before all have read theirs.
    hb.barrier()
    report(result, rank)
    hb.shutdown()


if __name__ == "__main__":
    main()
