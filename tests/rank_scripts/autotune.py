"""Rank script: autotune while a job trains (tests/test_autotune.py).

    hbrun -np N python autotune.py STEPS [PROPOSALS]

Every rank first checks that bad autotune values fail init with a
ConfigError naming the knob (before MPI is touched, so on every rank
alike). Then it runs at least STEPS steps of a small model's gradient exchange,
and on until the job has applied PROPOSALS autotune proposals (default 0;
common.train_while_tuning):
TENSORS allreduces of rank-seeded float32 arrays of several sizes, started
together so that they fuse, and one allgather, every result checked
against numpy. Autotune runs meanwhile, as the launch's HB_AUTOTUNE_*
variables say. Each rank reports the parameters it applied per cycle
(hbcore._core.autotune_history), its current parameters and tunable
mask, and rank 0 also what the log and the plot hold; the test compares
the ranks.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Checker, expect_raises, rank_data, report,  # noqa: E402
                    train_while_tuning)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402
from hbcore._native import core  # noqa: E402

# Sizes of the "gradients" (float32 elements): small ones, as in a model
# with many small layers, and one of 256 KiB.
SIZES = [16, 64, 250, 1000, 4096, 10000, 32, 2048, 128, 65536, 7, 500]
# (config key, bad value, fragments of the message)
BAD = [
    ("autotune_steps_per_sample", "0", ["autotune_steps_per_sample", "'0'"]),
    ("autotune_warmup_samples", "-1", ["HB_AUTOTUNE_WARMUP_SAMPLES", "-1"]),
    ("autotune_bayes_opt_max_samples", "many",
     ["autotune_bayes_opt_max_samples", "many"]),
    ("autotune_gaussian_process_noise", "-0.5",
     ["HB_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "-0.5"]),
    ("autotune", "maybe", ["config key 'autotune'", "maybe"]),
]


def check_bad_values(checker: Checker) -> None:
    for key, value, fragments in BAD:
        checker.run("bad/" + key, lambda: expect_raises(
            lambda: hb.init(config={key: value}), hx.ConfigError,
            *fragments))


def step(step_index: int, size: int) -> bool:
    """One gradient exchange; True when every result matches numpy."""
    handles = []
    for k, n in enumerate(SIZES):
        x = rank_data(k, hb.rank(), [n], "float32")
        handles.append(hb.allreduce_async(x, name="grad.%d" % k, op=hb.Sum))
    row = np.full((1 + hb.rank(), 3), step_index * 10 + hb.rank(), np.int64)
    gathered = hb.allgather(row, name="rows")
    ok = True
    for k, (n, h) in enumerate(zip(SIZES, handles)):
        expected = sum(rank_data(k, r, [n], "float32").astype(np.float64)
                       for r in range(size))
        ok = ok and np.allclose(hb.synchronize(h), expected, rtol=1e-5,
                                atol=1e-5)
    expected_rows = np.concatenate([
        np.full((1 + r, 3), step_index * 10 + r, np.int64)
        for r in range(size)])
    return ok and np.array_equal(gathered, expected_rows)


def main() -> None:
    steps = int(sys.argv[1])
    proposals = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    checker = Checker()
    check_bad_values(checker)
    hb.init()
    rank = hb.rank()
    results_ok = train_while_tuning(
        lambda i: step(i, hb.size()), steps, proposals,
        lambda done: bool(hb.broadcast(np.array([done], np.int32), 0,
                                       name="tuning.stop")[0]))
    # After shutdown every rank's loop has ended after the same cycle, so
    # the record of applied parameters is complete (the core keeps it), and
    # rank 0's tuner thread has ended: the log is complete too.
    hb.shutdown()
    history = [[cycle, params] for cycle, params in core.autotune_history()]
    current, mask = core.autotune_state()
    out = {"rank": rank, "results_ok": results_ok, "history": history,
           "current": current, "mask": mask,
           "tune_bits": dict(core.TUNE_BITS), "cases": checker.results}
    log = os.environ.get("HB_AUTOTUNE_LOG")
    if rank == 0 and log:
        from hbcore.autotune import plot, read_log
        out["log_header"] = open(log).readline().strip()
        out["log_rows"] = read_log(log)
        png = log + ".png"
        plot(log, png)
        with open(png, "rb") as f:
            out["png_head"] = list(f.read(8))
        out["png_bytes"] = os.path.getsize(png)
    report(out)


if __name__ == "__main__":
    main()
