"""A short data-parallel training run for the TF_CONFIG launch tests
(tests/test_tf_config_launch.py), also run under plain hbrun to compare.

Every rank fits a linear model by SGD on data seeded by its rank: each step
averages the ranks' gradients with one allreduce. The rank also computes
the same training from every rank's data with numpy alone (the expected
weights), and reports what it saw of the job: rank, size, local rank and
size, its TF_CONFIG task and CUDA_VISIBLE_DEVICES, and with --context what
hb.context says (task_type, task_id, rank, world_size, local_rank).

HB_TEST_KILL_RANK=r: rank r writes its pid and SIGKILLs itself after the
first step, while the others wait in the second (a fault test).
HB_TEST_HOLD=1: after the first step every rank writes its pid and then
waits (up to a minute) while the test stops a machine's launcher.
"""
import json
import os
import signal
import sys
import time

import numpy as np

from common import report

import hbcore

STEPS = 5
LR = 0.1
FEATURES = 4


def data(rank):
    rng = np.random.default_rng(1000 + rank)
    x = rng.standard_normal((16, FEATURES))
    y = x @ np.arange(1.0, FEATURES + 1) + 0.1 * rng.standard_normal(16)
    return x, y


def gradient(w, x, y):
    return x.T @ (x @ w - y) / len(y)


def main():
    hbcore.init()
    rank, size = hbcore.rank(), hbcore.size()
    kill_rank = int(os.environ.get("HB_TEST_KILL_RANK", "-1"))
    hold = os.environ.get("HB_TEST_HOLD") == "1"
    x, y = data(rank)
    w = np.zeros(FEATURES)
    for step in range(STEPS):
        g = hbcore.allreduce(gradient(w, x, y), op=hbcore.Average,
                             name="grad.%d" % step)
        w = w - LR * g
        if step == 0 and (kill_rank >= 0 or hold):
            with open(os.path.join(os.environ["HB_TEST_OUT"],
                                   "pid.%d" % rank), "w") as f:
                f.write(str(os.getpid()))
            if rank == kill_rank:
                os.kill(os.getpid(), signal.SIGKILL)
            if hold:
                time.sleep(60)  # the test kills a launcher meanwhile
    expected = np.zeros(FEATURES)
    everyone = [data(r) for r in range(size)]
    for step in range(STEPS):
        expected = expected - LR * np.mean(
            [gradient(expected, xr, yr) for xr, yr in everyone], axis=0)
    result = {"rank": rank, "size": size, "local_rank": hbcore.local_rank(),
              "local_size": hbcore.local_size(), "weights": w.tolist(),
              "expected": expected.tolist(),
              "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "task": json.loads(os.environ.get("TF_CONFIG", "{}")).get(
                  "task")}
    if "--context" in sys.argv[1:]:
        import hbcore_tf as hb
        ctx = hb.context
        result["context"] = [ctx.task_type, ctx.task_id, ctx.rank,
                             ctx.world_size, ctx.local_rank]
    report(result)


main()
