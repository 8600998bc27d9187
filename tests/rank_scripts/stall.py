"""Rank script: a tensor only rank 0 submits ('lonely').

    hbrun -np N python stall.py warn       (HB_STALL_CHECK_TIME_SECONDS=1)
    hbrun -np N python stall.py shutdown   (... and
                                            HB_STALL_SHUTDOWN_TIME_SECONDS=2)

warn: rank 0 submits 'lonely' async and synchronizes; the others sleep
SLEEP_S seconds (long enough for warnings to be logged), then shut down.
Rank 0's synchronize then fails with ShutdownError (another rank shut down).

shutdown: same, but the stall shutdown ends the job: rank 0's synchronize
raises ShutdownError naming the tensor and the missing ranks; the others,
after their sleep, call allreduce and must get ShutdownError too.

Every rank reports what it got (exception type and message, timings); in
shutdown mode every rank then calls init() again and runs an allreduce.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import env_rank, exc_info, report  # noqa: E402

import hbcore as hb  # noqa: E402

# warn: long enough for warnings at 1, 2 and 3 s; shutdown: past the 2 s
# stall shutdown (if that is late, the allreduce is pending when it comes
# and fails the same way).
SLEEP_S = {"warn": 3.5, "shutdown": 2.5}


def main() -> None:
    mode = sys.argv[1]
    rank = env_rank()
    hb.init()
    result = {"mode": mode, "size": hb.size()}
    start = time.monotonic()
    if rank == 0:
        handle = hb.allreduce_async(np.ones(4, np.float32), name="lonely")
        try:
            hb.synchronize(handle)
            result["outcome"] = "completed"
        except Exception as exc:  # noqa: BLE001
            result["outcome"] = "raised"
            result["error"] = exc_info(exc)
    else:
        time.sleep(SLEEP_S[mode])
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
