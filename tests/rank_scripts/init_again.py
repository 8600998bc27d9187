"""Rank script: init() called again while the runtime exists never starts
a collective that some peers do not join.

    hbrun -np N python init_again.py

1. Every rank inits over ``comm=list(range(N))``; rank 0 alone calls
   ``init(comm=...)`` again. The runtime runs, so the call returns at once
   (it used to build the ranks' communicator first: a collective the
   others never entered).
2. The last rank ("the leaver") calls shutdown() and exits. Every other
   rank waits for its marker, then calls init() again, as HybridBackend
   code does implicitly (hb.data iterators initialize hbcore). The runtime
   a peer stopped stays until this rank's own shutdown(), so init()
   returns at once (it used to replace it, entering MPI_Comm_dup with a
   peer that had left: a hang) and the next allreduce raises ShutdownError
   naming the leaver.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (await_peers, env_rank, env_size, exc_info,  # noqa: E402
                    report, signal_peers)

import hbcore as hb  # noqa: E402


def main() -> None:
    rank, size = env_rank(), env_size()
    leaver = size - 1
    result = {}
    hb.init(comm=list(range(size)))
    if rank == 0:
        start = time.monotonic()
        hb.init(comm=list(range(size)))
        result["second_init_s"] = time.monotonic() - start
    out = hb.allreduce(np.full(2, rank + 1, np.int64), op=hb.Sum,
                       name="after-second-init")
    result["sum"] = out.tolist()
    if rank == leaver:
        hb.shutdown()
        signal_peers("left")
        report(result, rank)
        return
    await_peers(["left"])
    start = time.monotonic()
    hb.init()
    result["init_after_peer_shutdown_s"] = time.monotonic() - start
    result["initialized"] = hb.is_initialized()
    try:
        hb.allreduce(np.ones(2), name="after-peer-shutdown")
        result["allreduce"] = "completed"
    except Exception as exc:  # noqa: BLE001
        result["allreduce"] = exc_info(exc)
    hb.shutdown()
    result["initialized_after_shutdown"] = hb.is_initialized()
    report(result, rank)


if __name__ == "__main__":
    main()
