"""Elastic training benchmark: what a commit costs and how long a recovery
takes (docs/elastic.md).

Run::

    python benchmarks/elastic.py                 # ~2-4 min
    python benchmarks/elastic.py --quick         # smaller state, ~1 min
    python benchmarks/elastic.py --json out.json # also write the numbers

Every job runs under hbrun's elastic driver on hosts emulated by hydra's
fork launcher (one rank per emulated host, each with its own store
directory), in the numpy front end (no TensorFlow start-up in the
figures).  Rows:

  commit, dense      an ObjectState holding the 20 MB float32
                     parameters of a numpy MLP (1024 -> 2560 -> 1024, no
                     bias: 5.2M parameters), trained data-parallel at
                     batch 32 (forward, backward, allreduce of the 20 MB
                     gradient, SGD) with a commit every 10 steps: ms per
                     ``commit()`` and per step (medians of the slowest
                     rank), and the commit's share of a step at one commit
                     per 10 steps.  Target: under 5%.  Info rows: the
                     gradient's allreduce alone, and the bound: one
                     memcpy of the state into a buffer it already has
                     (what a commit cannot go below; its share says
                     whether the machine or the code is the limit).
  commit, TF         the same model in Keras (Dense layers, SGD) trained
                     with DistributedGradientTape, committed as a
                     TensorFlowKerasState every 10 steps: ms per commit
                     and its share of that model's step.
  commit, sharded    a RowShardedState of 8M x 16 float32 rows (512 MB,
                     split over the ranks): ms per ``commit()``, which
                     writes each rank's rows on its host and sends them
                     to the second host.
  recovery           the rank on the second host SIGKILLs itself at step
                     15 (last commit after step 9, so 5 steps are
                     redone); time from the kill to the first step after
                     the restore, split into detection (the kill to
                     hbrun starting the next generation: hbrun told by
                     the rank wrapper's status line, the old world
                     stopped, the driver's turn; from hbrun's "elastic
                     generation 0 ended" line), re-formation (that to
                     the new ranks' reset callback: process start,
                     imports, hbcore.init, the program's set-up) and
                     state sync (``sync()``: the broadcast of the 20 MB
                     commit), in a table of its own with Horovod's row
                     beside it.  Targets: detection under 0.5 s,
                     recovery under 1.5 s.

At 2 and 3 ranks.  When Horovod with TensorFlow and Gloo is importable
in this python (docs/benchmarks.md ("Building Horovod 0.28.1 for the
comparison")), Horovod elastic's commit and recovery are measured in the
same run and added as rows with hbcore / Horovod ratios
(benchmarks/elastic_horovod.py says what they run); else one line says
why not.
"""
import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import WORKER_CWD, hbrun, print_and_save, worker_env  # noqa: E402
import elastic_horovod  # noqa: E402
# One job definition for both runtimes' rows: the dense state's size, the
# step at which a rank kills itself, the per-job timeout.
from elastic_horovod import DENSE_MB, KILL_STEP, TIMEOUT_S  # noqa: E402


# --- rank side ---------------------------------------------------------------

def _slowest(hvd, seconds: float) -> float:
    return float(hvd.allreduce(np.array([seconds]), op=hvd.Max,
                               name="bench.slowest")[0])


def _median_ms(hvd, fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        hvd.barrier()
        start = time.perf_counter()
        fn()
        times.append(_slowest(hvd, time.perf_counter() - start))
    return 1000.0 * float(np.median(times))


# The dense model: x (BATCH x IN) -> relu(x W1) (HIDDEN) -> W2 (IN);
# 2 * IN * HIDDEN float32 = 20 MB (HIDDEN / --scale in a quick run).
BATCH, IN, HIDDEN = 32, 1024, 2560
COMMIT_EVERY = 10


def _train_and_commit(hvd, step, commit, reps: int):
    """Runs ``reps`` rounds of COMMIT_EVERY steps and a commit; returns
    the median ms of a step and of a commit (slowest rank each)."""
    steps, commits = [], []
    for _ in range(reps):
        for _ in range(COMMIT_EVERY):
            start = time.perf_counter()
            step()
            steps.append(time.perf_counter() - start)
        start = time.perf_counter()
        commit()
        commits.append(time.perf_counter() - start)
    slowest = hvd.allreduce(np.array([np.median(steps), np.median(commits)]),
                            op=hvd.Max, name="bench.slowest.train")
    return 1000.0 * float(slowest[0]), 1000.0 * float(slowest[1])


def _mlp_step(hvd, state, x, target, hidden: int):
    """One data-parallel SGD step of the numpy MLP in ``state.params``."""
    w1 = state.params[:IN * hidden].reshape(IN, hidden)
    w2 = state.params[IN * hidden:].reshape(hidden, IN)
    h = np.maximum(x @ w1, 0)
    dy = (h @ w2 - target) * (2.0 / target.size)
    dh = (dy @ w2.T) * (h > 0)
    grad = np.concatenate([(x.T @ dh).ravel(), (h.T @ dy).ravel()])
    state.params -= 1e-3 * hvd.allreduce(grad, op=hvd.Average,
                                         name="bench.mlp.grad")


def rank_commit(args) -> None:
    import hbcore as hvd
    hvd.init()
    hidden = HIDDEN // args.scale
    floats = 2 * IN * hidden
    rng = np.random.default_rng(hvd.rank())
    x = rng.standard_normal((BATCH, IN), np.float32)
    target = rng.standard_normal((BATCH, IN), np.float32)
    dense = hvd.elastic.ObjectState(
        params=np.full(floats, 0.01, np.float32))
    train_ms, dense_ms = _train_and_commit(
        hvd, lambda: _mlp_step(hvd, dense, x, target, hidden), dense.commit,
        args.reps)
    grad = np.ones(floats, np.float32)
    step_ms = _median_ms(hvd, lambda: hvd.allreduce(grad, op=hvd.Sum,
                                                    name="bench.grad"),
                         args.reps)
    copy = np.empty_like(dense.params)
    memcpy_ms = _median_ms(hvd, lambda: np.copyto(copy, dense.params),
                           args.reps)
    rows = args.rows // args.scale
    sharded = hvd.elastic.RowShardedState(
        {"emb": np.zeros((rows, args.dim), np.float32)})
    sharded_ms = _median_ms(hvd, sharded.commit, max(3, args.reps // 3))
    if hvd.rank() == 0:
        with open(os.path.join(args.out, "commit.json"), "w") as f:
            json.dump({"step_ms": step_ms, "dense_ms": dense_ms,
                       "train_ms": train_ms, "memcpy_ms": memcpy_ms,
                       "dense_mb": floats * 4 / 2 ** 20,
                       "sharded_ms": sharded_ms, "rows": rows,
                       "dim": args.dim}, f)


def rank_tf_commit(args) -> None:
    import tensorflow as tf
    import hbcore_tf as hvd
    from hbcore_tf._base import compat
    keras = compat.keras_module()
    hvd.init()
    hidden = HIDDEN // args.scale
    model = keras.Sequential([
        keras.Input((IN,)),
        keras.layers.Dense(hidden, activation="relu", use_bias=False),
        keras.layers.Dense(IN, use_bias=False)])
    opt = keras.optimizers.SGD(1e-3)
    rng = np.random.default_rng(hvd.rank())
    x = tf.constant(rng.standard_normal((BATCH, IN), np.float32))
    target = tf.constant(rng.standard_normal((BATCH, IN), np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - target))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    step()  # traces, and builds the optimizer before the state reads it
    state = hvd.elastic.TensorFlowKerasState(model, opt, batch=0)
    train_ms, commit_ms = _train_and_commit(hvd, step, state.commit,
                                            args.reps)
    if hvd.rank() == 0:
        with open(os.path.join(args.out, "tf_commit.json"), "w") as f:
            json.dump({"tf_train_ms": train_ms, "tf_commit_ms": commit_ms,
                       "tf_mb": model.count_params() * 4 / 2 ** 20}, f)


def rank_recovery(args) -> None:
    import hbcore as hvd
    from hbcore.launcher.rank.elastic_protocol import (host_of_rank,
                                                       parse_hosts_var)
    hvd.init()
    floats = DENSE_MB * 2 ** 20 // 4 // args.scale
    state = hvd.elastic.ObjectState(step=0, weights=np.ones(floats,
                                                            np.float32))
    generation = int(os.environ["HB_ELASTIC_GENERATION"])
    host = host_of_rank(parse_hosts_var(os.environ["HB_ELASTIC_HOSTS"]),
                        hvd.rank())[0]
    marks: Dict[str, float] = {}
    state.register_reset_callbacks([lambda: marks.setdefault(
        "reset", time.time())])

    @hvd.elastic.run
    def train(state) -> None:
        for state.step in range(state.step, KILL_STEP + 5):
            if generation > 0 and "first" not in marks:
                marks["first"] = time.time()
            if generation == 0 and host == "hB" and state.step == KILL_STEP:
                with open(os.path.join(args.out, "kill.json"), "w") as f:
                    json.dump({"kill": time.time()}, f)
                os.kill(os.getpid(), signal.SIGKILL)
            state.weights += hvd.allreduce(state.weights, op=hvd.Sum,
                                           name="bench.grad") * 0
            if state.step % 10 == 9:
                state.step += 1
                state.commit()

    train(state)
    if generation > 0 and hvd.rank() == 0:
        with open(os.path.join(args.out, "recovery.json"), "w") as f:
            json.dump(marks, f)


# --- driver side -------------------------------------------------------------

def _job(np_: int, argv: List[str], env: Dict[str, str],
         lines: "queue.Queue") -> int:
    """Runs an elastic hbrun job; puts (time, line) of its stderr."""
    hosts = ",".join("h%s:1" % "ABC"[i] for i in range(np_))
    command = hbrun(np_, [os.path.abspath(__file__)] + argv,
                    ["-H", hosts, "--mpi-args=-launcher fork", "--min-np",
                     str(np_ - 1)])
    proc = subprocess.Popen(command, env=env, cwd=WORKER_CWD,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    timer = threading.Timer(TIMEOUT_S, lambda: os.killpg(proc.pid, 9))
    timer.start()
    try:
        for line in proc.stderr:
            lines.put((time.time(), line))
        return proc.wait()
    finally:
        timer.cancel()


def measure(np_: int, args) -> dict:
    out = tempfile.mkdtemp(prefix="hbcore-bench-elastic-")
    common = ["--out", out, "--scale", str(args.scale), "--rows",
              str(args.rows), "--dim", str(args.dim), "--reps",
              str(args.reps)]
    env = worker_env()
    lines: "queue.Queue" = queue.Queue()
    if _job(np_, ["--rank", "commit"] + common, env, lines) != 0:
        raise SystemExit("the commit job at %d ranks failed:\n%s" % (
            np_, "".join(line for _, line in list(lines.queue)[-40:])))
    with open(os.path.join(out, "commit.json")) as f:
        result = json.load(f)
    if _job(np_, ["--rank", "tf_commit"] + common, env, lines) != 0:
        raise SystemExit("the TF commit job at %d ranks failed:\n%s" % (
            np_, "".join(line for _, line in list(lines.queue)[-40:])))
    with open(os.path.join(out, "tf_commit.json")) as f:
        result.update(json.load(f))
    lines = queue.Queue()
    if _job(np_, ["--rank", "recovery"] + common, env, lines) != 0:
        raise SystemExit("the recovery job at %d ranks failed:\n%s" % (
            np_, "".join(line for _, line in list(lines.queue)[-40:])))
    with open(os.path.join(out, "kill.json")) as f:
        kill = json.load(f)["kill"]
    with open(os.path.join(out, "recovery.json")) as f:
        marks = json.load(f)
    detection = split_detection(kill, list(lines.queue))
    result.update(detection,
                  reform_s=marks["reset"] - (kill + detection["detect_s"]),
                  sync_s=marks["first"] - marks["reset"],
                  recovery_s=marks["first"] - kill)
    return result


# hbrun's line at the end of a generation that re-forms
# (elastic/driver.py): how long after it learnt of the first status the
# ranks were stopped.
ENDED = re.compile(r"elastic generation 0 ended \(.*\); its ranks stopped "
                   r"([0-9.]+) s after hbrun learnt it")


def split_detection(kill: float, lines: List[tuple]) -> Dict[str, float]:
    """Splits the detection of a kill from hbrun's stderr lines.

    Args:
        kill: When the rank killed itself (time.time()).
        lines: ``(arrival time, line)`` of hbrun's stderr.

    Returns:
        ``detect_s`` (the kill to hbrun starting generation 1),
        ``notice_s`` (the kill to hbrun learning of it: the wrapper's
        status line through hydra), ``stop_s`` (that to the old world
        stopped: settle pause, teardown) and ``relaunch_s`` (that to the
        next generation's start: the driver's own turn).

    Raises:
        SystemExit: hbrun printed neither line.
    """
    ended = [(t, float(m.group(1))) for t, line in lines
             for m in [ENDED.search(line)] if m]
    started = [t for t, line in lines if "elastic generation 1 on" in line]
    if not ended or not started:
        raise SystemExit("hbrun did not say when generation 0 ended and 1 "
                         "started:\n" + "".join(line for _, line in lines))
    stopped_at, stop_s = ended[0]
    return {"detect_s": started[0] - kill,
            "notice_s": stopped_at - stop_s - kill, "stop_s": stop_s,
            "relaunch_s": started[0] - stopped_at}


# The recovery table's columns: (heading, key, width).
RECOVERY_COLUMNS = [("kill->step", "recovery_s", 10),
                    ("detection", "detect_s", 9),
                    ("[hbrun told", "notice_s", 11),
                    ("world stopped", "stop_s", 13),
                    ("next started]", "relaunch_s", 13),
                    ("re-formation", "reform_s", 12),
                    ("state sync", "sync_s", 10)]


def recovery_table(hbcore: Dict[int, dict], horovod) -> List[str]:
    """The recovery from a kill -9 and its parts, one row per runtime and
    rank count (Horovod's where it was measured).

    Args:
        hbcore: measure()'s results per rank count.
        horovod: elastic_horovod.measure_all()'s, or why not measured.

    Returns:
        The table's lines.  Detection's parts (in brackets) are hbcore's:
        the kill to hbrun learning of it (the rank wrapper's status line
        through hydra), the settle pause and teardown of the old world,
        and the driver's turn to the next generation's start.  A part not
        measured is "-".
    """
    head = "%-6s %-15s" % ("ranks", "runtime") + "".join(
        " %*s" % (width, name) for name, _, width in RECOVERY_COLUMNS)
    lines = ["recovery from kill -9 of the rank on the second host, s "
             "(targets: detection < 0.5, kill->step < 1.5)", head]
    runtimes = [("hbcore", hbcore)]
    if isinstance(horovod, dict):
        runtimes.append(("Horovod + Gloo", horovod))
    for np_ in sorted(hbcore):
        for name, results in runtimes:
            r = results.get(np_, {})
            lines.append("%-6d %-15s" % (np_, name) + "".join(
                " %*s" % (width, "%.2f" % r[key] if r.get(key) is not None
                          else "-") for _, key, width in RECOVERY_COLUMNS))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--rank", choices=["commit", "tf_commit",
                                           "recovery"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=int, default=1,
                        help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=8 * 2 ** 20,
                        help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=16,
                        help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=10,
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank == "commit":
        return rank_commit(args)
    if args.rank == "tf_commit":
        return rank_tf_commit(args)
    if args.rank == "recovery":
        return rank_recovery(args)
    if args.quick:
        args.scale, args.reps = 8, 5
    results = {np_: measure(np_, args) for np_ in (2, 3)}
    horovod = elastic_horovod.measure_all(args)
    lines = ["hbcore elastic (numpy front end; hosts emulated by hydra's "
             "fork launcher)",
             "%-8s %-38s %12s %12s" % ("ranks", "row", "value", "target")]
    for np_, r in results.items():
        def share(ms: float, step_ms: float) -> float:
            return ms / (COMMIT_EVERY * step_ms) * 100
        lines += [
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "commit, dense %.0f MB" % r["dense_mb"], r["dense_ms"],
                ""),
            "%-8d %-38s %10.1f %% %12s" % (
                np_, "  share of a step (1 per 10 steps)",
                share(r["dense_ms"], r["train_ms"]), "< 5 %"),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "  step: MLP fwd + bwd + allreduce", r["train_ms"], ""),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "  info: allreduce of the gradient", r["step_ms"], ""),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "  bound: one memcpy of the state", r["memcpy_ms"], ""),
            "%-8d %-38s %10.1f %% %12s" % (
                np_, "  bound's share of a step",
                share(r["memcpy_ms"], r["train_ms"]), ""),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "commit, TF Keras %.0f MB" % r["tf_mb"],
                r["tf_commit_ms"], ""),
            "%-8d %-38s %10.1f %% %12s" % (
                np_, "  share of its step (1 per 10 steps)",
                share(r["tf_commit_ms"], r["tf_train_ms"]), "< 5 %"),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "  step: Keras fwd + bwd + allreduce",
                r["tf_train_ms"], ""),
            "%-8d %-38s %9.1f ms %12s" % (
                np_, "commit, sharded %d x %d rows" % (r["rows"], r["dim"]),
                r["sharded_ms"], "")]
    lines += recovery_table(results, horovod)
    lines += elastic_horovod.table_lines(results, horovod)
    for np_ in results if isinstance(horovod, dict) else ():
        results[np_]["horovod"] = horovod[np_]
    print_and_save(lines, results, args.json)


if __name__ == "__main__":
    main()
