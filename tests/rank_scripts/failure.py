"""Rank script: one rank fails while the others wait for it.

    hbrun -np N python failure.py MODE FAILING_RANK

MODE:
  raise    the failing rank raises RuntimeError;
  exit     the failing rank calls sys.exit(3);
  sigkill  the failing rank SIGKILLs itself;
           each once every other rank has submitted the tensor it waits on;
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
from common import (await_peers, env_rank, exc_info, report,  # noqa: E402
                    signal_peers)

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
        started = []
        for i in range(4):
            handle = hb.allreduce_async(np.ones(3),
                                        name="orphan.%d.%d" % (rank, i))
            waiting = threading.Event()
            started.append(waiting)

            def wait(h=handle, waiting=waiting):
                waiting.set()
                try:
                    hb.synchronize(h)
                except hb.ShutdownError:
                    pass
            threading.Thread(target=wait, daemon=True).start()
        # Every thread is at its synchronize call (an event, not a sleep),
        # and every rank has submitted its tensors before any rank shuts
        # down (else a late submission fails with ShutdownError).
        for waiting in started:
            if not waiting.wait(timeout=30):
                raise RuntimeError("a waiting thread never started")
        signal_peers("daemon-waiting.%d" % rank)
        await_peers(["daemon-waiting.%d" % r for r in range(hb.size())])
        # Report first: the crash window is between shutdown() waking the
        # threads and the end of the interpreter, so nothing may follow.
        report({"outcome": "exiting"}, rank)
        hb.shutdown()
        return
    if rank == failing:
        # Fails only once every other rank has submitted 'never' (a
        # marker-file handshake, no sleep): their operation is pending.
        await_peers(["submitted.%d" % r for r in range(hb.size())
                     if r != failing])
        if mode == "raise":
            raise RuntimeError("boom from rank %d" % rank)
        if mode == "exit":
            sys.exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    handle = hb.allreduce_async(np.ones(3), name="never")
    signal_peers("submitted.%d" % rank)
    try:
        hb.synchronize(handle)
        report({"outcome": "completed"}, rank)
    except Exception as exc:  # noqa: BLE001
        report({"outcome": "raised", "error": exc_info(exc),
                "seconds": time.monotonic() - start}, rank)


if __name__ == "__main__":
    main()
