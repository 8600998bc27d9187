"""Rank script: one rank fails while the others wait for it.

    hbrun -np N python failure.py MODE FAILING_RANK

MODE:
  raise    the failing rank raises RuntimeError after 0.5 s;
  exit     the failing rank calls sys.exit(3) after 0.5 s;
  sigkill  the failing rank SIGKILLs itself after 0.5 s;
  daemon   no failure: every rank starts 4 daemon threads that block in
           synchronize on tensors no other rank submits, then every rank
           shuts down and exits normally (the threads must not crash the
           exit). FAILING_RANK is ignored.
The other ranks block in synchronize on a tensor the failing rank never
submits; when that raises, they report the exception at once and exit 0.
"""
import os
import signal
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, exc_info, report  # noqa: E402

import hbcore as hb  # noqa: E402


def main() -> None:
    mode, failing = sys.argv[1], int(sys.argv[2])
    rank = env_rank()
    hb.init()
    # Everyone is up and past init before the failure.
    hb.allreduce(np.ones(2), name="warmup")
    start = time.monotonic()
    if mode == "daemon":
        # Every rank (FAILING_RANK is unused): tensors no peer submits.
        for i in range(4):
            handle = hb.allreduce_async(np.ones(3),
                                        name="orphan.%d.%d" % (rank, i))

            def wait(h=handle):
                try:
                    hb.synchronize(h)
                except hb.ShutdownError:
                    pass
            threading.Thread(target=wait, daemon=True).start()
        time.sleep(1.0)
        # Report first: the crash window is between shutdown() waking the
        # threads and the end of the interpreter, so nothing may follow.
        report({"outcome": "exiting"}, rank)
        hb.shutdown()
        return
    if rank == failing:
        time.sleep(0.5)
        if mode == "raise":
            raise RuntimeError("boom from rank %d" % rank)
        if mode == "exit":
            sys.exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    handle = hb.allreduce_async(np.ones(3), name="never")
    try:
        hb.synchronize(handle)
        report({"outcome": "completed"}, rank)
    except Exception as exc:  # noqa: BLE001
        report({"outcome": "raised", "error": exc_info(exc),
                "seconds": time.monotonic() - start}, rank)


if __name__ == "__main__":
    main()
