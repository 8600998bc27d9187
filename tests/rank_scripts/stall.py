"""Rank script: a tensor only rank 0 submits ('lonely').

    hbrun -np N python stall.py warn       (HB_STALL_CHECK_TIME_SECONDS=1)
    hbrun -np N python stall.py shutdown   (... and
                                            HB_STALL_SHUTDOWN_TIME_SECONDS=2)
    hbrun -np N python stall.py stop       (the same)

warn: rank 0 submits 'lonely' async and synchronizes; the others stay
away WARN_STALL_S seconds (long enough for warnings to be logged), then
shut down.
Rank 0's synchronize then fails with ShutdownError (another rank shut down).

shutdown: same, but the stall shutdown ends the job: rank 0's synchronize
raises ShutdownError naming the tensor and the missing ranks; the others
wait until rank 0 has seen that error (a marker-file handshake), then call
allreduce and must get ShutdownError too.

stop: the last rank SIGSTOPs itself instead (a rank that hangs without
dying: the others block on it in the control plane, where no stall check
runs); the others' allreduce never completes.  Only the launcher ends
such a job (its rank wrapper kills the stopped rank: hang_watch.py).

Every rank reports what it got (exception type and message, timings); in
shutdown mode every rank then calls init() again and runs an allreduce.
"""
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (await_peers, env_rank, exc_info, report,  # noqa: E402
                    signal_peers)

import hbcore as hb  # noqa: E402

# warn: the stall the warnings are about lasts this long, enough for
# warnings at 1, 2 and 3 s. (A duration under test, not an ordering: the
# shutdown mode orders its ranks by a handshake.)
WARN_STALL_S = 3.5


def main() -> None:
    mode = sys.argv[1]
    rank = env_rank()
    hb.init()
    result = {"mode": mode, "size": hb.size()}
    start = time.monotonic()
    if mode == "stop":
        if rank == hb.size() - 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        hb.allreduce(np.ones(4, np.float32), name="frozen")
        result["outcome"] = "completed"
    elif rank == 0:
        handle = hb.allreduce_async(np.ones(4, np.float32), name="lonely")
        try:
            hb.synchronize(handle)
            result["outcome"] = "completed"
        except Exception as exc:  # noqa: BLE001
            result["outcome"] = "raised"
            result["error"] = exc_info(exc)
        if mode == "shutdown":
            signal_peers("stall-ended")
    else:
        if mode == "shutdown":
            await_peers(["stall-ended"])
        else:
            time.sleep(WARN_STALL_S)
        if mode == "shutdown":
            try:
                hb.allreduce(np.ones(4, np.float32), name="after-stall")
                result["outcome"] = "completed"
            except Exception as exc:  # noqa: BLE001
                result["outcome"] = "raised"
                result["error"] = exc_info(exc)
        else:
            result["outcome"] = "slept"
    result["seconds"] = time.monotonic() - start
    hb.shutdown()
    result["shutdown_seconds"] = time.monotonic() - start
    if mode == "shutdown":
        # After a shutdown every rank may init again and carry on.
        try:
            hb.init()
            out = hb.allreduce(np.full(3, rank, np.int64), name="reinit",
                               op=hb.Sum)
            expected = [sum(range(hb.size()))] * 3
            result["reinit"] = ("ok" if out.tolist() == expected
                                else "wrong result %s" % out.tolist())
            hb.shutdown()
        except Exception as exc:  # noqa: BLE001
            result["reinit"] = "%s: %s" % (type(exc).__name__, exc)
    report(result, rank)


if __name__ == "__main__":
    main()
