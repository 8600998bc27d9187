"""Rank script: integer "training" under hbrun's elastic driver.

Step s adds the allreduce-Sum of (rank + 1) * (s + 1) to ``state.total``
(exact in int64, so a replay with the world sizes is exact); state is
committed after every odd step.  Every rank appends ``generation size
step`` to $HB_TEST_OUT/steps.log after each step, so the test can replay
each step with the size of the last world that ran it.

Events (HB_TEST_EVENTS, comma separated, each done once per job: a marker
file in $HB_TEST_OUT records it):
    kill:HOST:STEP   the rank on emulated host HOST SIGKILLs itself before
                     step STEP's allreduce
    exit0:HOST:STEP  that rank exits 0 there (a worker that ends early)
    add:HOST:STEP    in a world without HOST, rank 0 appends HOST:1 to
                     $HB_TEST_HOSTS_FILE after step STEP, and every rank
                     commits and waits until the driver's host change
                     interrupts the world
The final world's ranks report {total, size, generation, resets: the
world size seen by each reset callback call in this process}.
"""
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import OUT_DIR, report  # noqa: E402

import hbcore as hvd  # noqa: E402
from hbcore.launcher.elastic_protocol import (host_of_rank,  # noqa: E402
                                              parse_hosts_var)

STEPS = 10


def once(event: str) -> bool:
    """True the first time any rank of the job reaches ``event``."""
    try:
        fd = os.open(os.path.join(OUT_DIR, "done." + event.replace(":", "_")),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def main() -> None:
    hvd.init()
    host = host_of_rank(parse_hosts_var(os.environ["HB_ELASTIC_HOSTS"]),
                        hvd.rank())[0]
    events = [e.split(":") for e in
              os.environ.get("HB_TEST_EVENTS", "").split(",") if e]
    state = hvd.elastic.ObjectState(step=0, total=0)
    resets = []  # the reset callbacks' calls in this process
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state: hvd.elastic.ObjectState) -> None:
        for state.step in range(state.step, STEPS):
            s = state.step
            for kind, where, at in events:
                if where == host and int(at) == s and kind in (
                        "kill", "exit0") and once("%s:%s:%s" % (kind, where,
                                                                at)):
                    if kind == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    os._exit(0)
            got = hvd.allreduce(np.array([(hvd.rank() + 1) * (s + 1)],
                                         np.int64), op=hvd.Sum,
                                name="step")
            state.total += int(got[0])
            with open(os.path.join(OUT_DIR, "steps.log"), "a") as f:
                f.write("%s %d %d\n" % (os.environ["HB_ELASTIC_GENERATION"],
                                        hvd.size(), s))
            if s % 2 == 1:
                state.step = s + 1
                state.commit()
            for kind, where, at in events:
                if kind == "add" and int(at) == s and where not in (
                        os.environ["HB_ELASTIC_HOSTS"]):
                    if hvd.rank() == 0:
                        with open(os.environ["HB_TEST_HOSTS_FILE"],
                                  "a") as f:
                            f.write("%s:1\n" % where)
                    state.step = s + 1
                    state.commit()
                    # Every rank waits here for the driver's notice
                    # (pacing only: the interrupt ends the wait).
                    while True:
                        state.check_host_updates()
                        time.sleep(0.05)
        state.step = STEPS

    train(state)
    report({"total": state.total, "size": hvd.size(), "resets": resets,
            "generation": int(os.environ["HB_ELASTIC_GENERATION"])},
           hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
