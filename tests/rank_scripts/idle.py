"""Rank script: CPU used by an idle runtime.

    hbrun -np N python idle.py [SECONDS]

After init and a warm-up allreduce, the main thread sleeps SECONDS (3) and
the process's CPU time (user + system, all threads: the core's background
thread included) over that window is reported as a fraction of one core;
WINDOWS (2) such windows back to back, so the test can discount a burst of
load from other processes.
"""
import os
import sys
import time

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, report  # noqa: E402

import hbcore as hb  # noqa: E402


WINDOWS = 2


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    rank = env_rank()
    hb.init()
    hb.allreduce(np.ones(8), name="warmup")
    hb.barrier()
    proc = psutil.Process()
    windows = []
    for _ in range(WINDOWS):
        cpu0, wall0 = cpu_seconds(proc), time.monotonic()
        time.sleep(seconds)
        cpu1, wall1 = cpu_seconds(proc), time.monotonic()
        windows.append({"cpu_fraction": (cpu1 - cpu0) / (wall1 - wall0),
                        "cpu_seconds": cpu1 - cpu0,
                        "wall_seconds": wall1 - wall0})
    hb.barrier()  # still alive and well after the idle period
    hb.shutdown()
    report({"windows": windows}, rank)


if __name__ == "__main__":
    main()
