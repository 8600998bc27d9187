"""Training throughput: hbcore (-np 1, -np 2) against TensorFlow's
MultiWorkerMirroredStrategy (2 workers), same model, same data, one run.

    python benchmarks/tf_training.py            # ~2-3 minutes
    python benchmarks/tf_training.py --quick    # smoke run
    ... --json out.json                                      # also save numbers

The script is its own driver: it launches
  1. ``hbrun -np 1`` and 2. ``hbrun -np 2`` of itself as hbcore workers
     (hbcore_tf.DistributedOptimizer around Keras 3 SGD), under HB_TIMELINE;
  3. two worker processes with TF_CONFIG naming two localhost ports, using
     tf.distribute.MultiWorkerMirroredStrategy (the same Keras 3 SGD
     created in the strategy's scope, which sums the gradients over the
     replicas with TF's collective all-reduce);
and prints one table.

Model: an MLP of 25 Dense layers (50 trainable variables) trained with
plain SGD on random data (one batch per rank, reused: the benchmark times
training steps, not input pipelines), the same per-rank batch in every
configuration. Every configuration runs the same custom train step in a
tf.function (forward, tape gradient, apply_gradients); MWMS wraps it in
strategy.run. (Keras 3 model.fit itself fails under MultiWorkerMirrored-
Strategy in TF 2.21 with "Attempt to convert a value (PerReplica...)", so
model.fit cannot be the common ground.)

Fairness on a small machine: every rank / worker runs TensorFlow with
intra_op_parallelism_threads=1 and inter_op_parallelism_threads=1, so 2
ranks use 2 cores for compute in both the hbcore and the MWMS runs (set
with --intra-op-threads / --inter-op-threads).

Throughput: samples per second over all ranks across the timed steps
(after the warmup steps; the last step's loss is fetched before the clock
stops; for hbcore the slowest rank's time).
Communication overhead comes from rank 0's timeline: the time inside
ALLREDUCE events (one per fused collective, counted once) between two
marker collectives around the timed steps, divided by the wall time
between the markers.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from typing import Dict, List

from _launch import free_ports, run, worker_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAYERS = 25


# --- workers -------------------------------------------------------------------

def _configure_tf(args: argparse.Namespace) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)


def _build_model(args: argparse.Namespace):
    import keras

    keras.utils.set_random_seed(1)
    layers = [keras.Input((args.width,))]
    layers += [keras.layers.Dense(args.width, activation="relu")
               for _ in range(LAYERS - 1)]
    layers.append(keras.layers.Dense(10))
    return keras.Sequential(layers)


def _data(args: argparse.Namespace, rank: int, rows: int):
    """Random inputs and labels of ``rank`` (one batch, reused every step:
    the benchmark times training, not input pipelines)."""
    import numpy as np

    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(rows, args.width)).astype(np.float32)
    y = rng.integers(0, 10, rows).astype(np.int64)
    return x, y


def _timed_loop(args: argparse.Namespace, step, on_mark=None) -> float:
    """Runs ``warmup`` then ``steps`` calls of ``step()``; returns the
    seconds of the timed ones (each step's loss is fetched, so the time
    covers finished steps). ``on_mark(name)`` runs at the start and end."""
    for _ in range(args.warmup):
        step().numpy()
    if on_mark:
        on_mark("start")
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    loss.numpy()
    seconds = time.perf_counter() - start
    if on_mark:
        on_mark("end")
    return seconds


def run_hbcore_worker(args: argparse.Namespace) -> None:
    _configure_tf(args)
    import keras
    import numpy as np
    import tensorflow as tf

    import hbcore
    import hbcore_tf as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model = _build_model(args)
    opt = keras.optimizers.SGD(0.001)
    if not args.no_exchange:
        opt = hvd.DistributedOptimizer(opt)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = _data(args, rank, args.batch_size)
    x, y = tf.constant(x), tf.constant(y)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        variables = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    step()
    hvd.broadcast_variables(model.variables + list(opt.variables), 0)

    def mark(name):
        hbcore.allreduce(np.zeros(1, np.float32), name="bench." + name)

    seconds = _timed_loop(args, step, mark)
    slowest = max(hbcore.allgather_object(seconds))
    if rank == 0:
        _write_result(args, size, slowest, model)
    hvd.shutdown()


def _write_result(args: argparse.Namespace, ranks: int, seconds: float,
                  model) -> None:
    result = {"ranks": ranks, "seconds": seconds, "steps": args.steps,
              "samples": args.steps * args.batch_size * ranks,
              "variables": len(model.trainable_variables),
              "parameters": int(model.count_params())}
    with open(args.out, "w") as f:
        json.dump(result, f)


def run_mwms_worker(args: argparse.Namespace) -> None:
    _configure_tf(args)
    import tensorflow as tf
    import keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = strategy.num_replicas_in_sync
    global_batch = args.batch_size * workers
    with strategy.scope():
        model = _build_model(args)
        opt = keras.optimizers.SGD(0.001)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none")
    x, y = _data(args, task, args.batch_size)
    x, y = tf.constant(x), tf.constant(y)

    def replica_step():
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example,
                                              global_batch_size=global_batch)
        variables = model.trainable_variables
        # Under the strategy the Keras optimizer sums the gradients over
        # the replicas (TF collective all-reduce) before applying them.
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    @tf.function
    def step():
        losses = strategy.run(replica_step)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    seconds = _timed_loop(args, step)
    if task == 0:
        _write_result(args, workers, seconds, model)


# --- driver ----------------------------------------------------------------------

def _worker_args(args: argparse.Namespace, role: str, out: str) -> List[str]:
    return [os.path.abspath(__file__), "--worker", role, "--out", out,
            "--width", str(args.width), "--batch-size", str(args.batch_size),
            "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--intra-op-threads", str(args.intra_op_threads),
            "--inter-op-threads", str(args.inter_op_threads)] + (
                ["--no-exchange"] if role == "bound" else [])


def run_hbcore(args: argparse.Namespace, np_: int, directory: str,
               exchange: bool = True) -> dict:
    tag = "%d%s" % (np_, "" if exchange else "bound")
    out = os.path.join(directory, "hbcore%s.json" % tag)
    timeline = os.path.join(directory, "timeline%s.json" % tag)
    env = worker_env({"HB_TIMELINE": timeline})
    command = [sys.executable, "-m", "hbcore.launcher.cli", "-np", str(np_),
               sys.executable] + _worker_args(
                   args, "hbcore" if exchange else "bound", out)
    run([command], [env], args.timeout, "hbcore -np %d" % np_)
    with open(out) as f:
        result = json.load(f)
    result.update(timeline_overhead(timeline))
    return result


def run_mwms(args: argparse.Namespace, workers: int, directory: str) -> dict:
    out = os.path.join(directory, "mwms.json")
    cluster = {"worker": ["localhost:%d" % p for p in free_ports(workers)]}
    commands, envs = [], []
    for index in range(workers):
        env = worker_env({"TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}})})
        commands.append([sys.executable] + _worker_args(args, "mwms", out))
        envs.append(env)
    run(commands, envs, args.timeout, "MultiWorkerMirroredStrategy")
    with open(out) as f:
        return json.load(f)


def timeline_overhead(path: str) -> dict:
    """Core time between the bench.start and bench.end markers of a Chrome
    trace, as fractions of the wall time between them: ALLREDUCE alone, and
    ALLREDUCE plus the copies into and out of the fusion buffer. Events of
    one fused collective share a start time and are counted once."""
    with open(path) as f:
        events = json.load(f)
    if isinstance(events, dict):
        events = events["traceEvents"]
    names = {e["pid"]: e.get("args", {}).get("name", "")
             for e in events if e.get("ph") == "M"}
    phases = ("ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER")
    spans: Dict[tuple, dict] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("name") in phases:
            entry = spans.setdefault((e["name"], e["ts"]),
                                     {"dur": e["dur"], "names": []})
            entry["names"].append(names.get(e["pid"], ""))
    marks = {}
    for (phase, ts), entry in spans.items():
        for name in entry["names"]:
            if phase == "ALLREDUCE" and name.startswith("bench."):
                marks[name] = ts
    start, end = marks.get("bench.start"), marks.get("bench.end")
    if start is None or end is None:
        return {}
    inside = {key: c for key, c in spans.items() if start < key[1] < end}
    reduces = [c for (phase, _), c in inside.items() if phase == "ALLREDUCE"]
    busy = sum(c["dur"] for c in reduces)
    core = sum(c["dur"] for c in inside.values())
    return {"comm_fraction": busy / (end - start),
            "core_fraction": core / (end - start),
            "collectives": len(reduces),
            "tensors_per_collective": (sum(len(c["names"]) for c in reduces)
                                       / max(1, len(reduces))),
            "allreduce_ms_per_collective": busy / max(1, len(reduces)) / 1e3}


def print_table(args: argparse.Namespace, rows: List[tuple]) -> None:
    base = rows[0][1]
    first = base
    print()
    print("Model: MLP, %d Dense layers of width %d (%d trainable variables, "
          "%.2fM parameters), Keras 3 SGD, custom tf.function train step" % (
              LAYERS, args.width, first["variables"],
              first["parameters"] / 1e6))
    print("Per-rank batch %d; %d warmup + %d timed steps; threads per rank/"
          "worker: intra_op=%d, inter_op=%d (so 2 ranks use 2 cores for "
          "compute)" % (args.batch_size, args.warmup, args.steps,
                        args.intra_op_threads, args.inter_op_threads))
    print("Machine: %d CPU cores visible" % (os.cpu_count() or 0))
    print()
    header = ("| configuration | ranks | samples/s (all ranks) | per rank | "
              "step ms | vs hbcore -np 1 | ALLREDUCE % of step | "
              "+ fusion copies % | tensors per collective |")
    print(header)
    print("|" + "---|" * 9)
    base_rate = base["samples"] / base["seconds"]
    for label, r in rows:
        rate = r["samples"] / r["seconds"]
        step_ms = r["seconds"] / r["steps"] * 1e3
        have = bool(r.get("collectives"))
        comm = "%.1f%%" % (100 * r["comm_fraction"]) if have else "n/a"
        core = "%.1f%%" % (100 * r["core_fraction"]) if have else "n/a"
        tensors = "%.0f" % r["tensors_per_collective"] if have else "n/a"
        print("| %s | %d | %.0f | %.0f | %.1f | %.2fx | %s | %s | %s |" % (
            label, r["ranks"], rate, rate / r["ranks"], step_ms,
            rate / base_rate, comm, core, tensors))
    print()
    print("The last row trains the same model in 2 processes with no gradient "
          "exchange at all (plain SGD, each rank alone): the most any 2-process "
          "data-parallel run can reach on this machine, since both processes "
          "compete for the same 2 cores and memory bandwidth.")
    hb2 = dict(rows)["hbcore -np 2"]
    mw = dict(rows)["MultiWorkerMirroredStrategy, 2 workers"]
    ratio = (hb2["samples"] / hb2["seconds"]) / (mw["samples"] / mw["seconds"])
    print()
    print("hbcore -np 2 / MultiWorkerMirroredStrategy (2 workers): %.2fx "
          "samples/s %s" % (ratio, "(hbcore ahead)" if ratio > 1 else
                            "(MWMS ahead)"))
    if "comm_fraction" in hb2:
        print("hbcore -np 2 per-step communication (ALLREDUCE time / step "
              "time): %.1f%% (%d fused collectives in %d timed steps, %.2f ms "
              "each; target < 10%%)" % (
                  100 * hb2["comm_fraction"], hb2["collectives"],
                  hb2["steps"], hb2["allreduce_ms_per_collective"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=512,
                        help="per-rank (per-replica) batch")
    parser.add_argument("--steps", type=int, default=40,
                        help="timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--intra-op-threads", type=int, default=1)
    parser.add_argument("--inter-op-threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per configuration")
    parser.add_argument("--quick", action="store_true",
                        help="few steps (a smoke run)")
    parser.add_argument("--json", default=None, help="also write results here")
    parser.add_argument("--worker", choices=["hbcore", "mwms", "bound"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--no-exchange", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup = 6, 2
    if args.worker in ("hbcore", "bound"):
        run_hbcore_worker(args)
        return 0
    if args.worker == "mwms":
        run_mwms_worker(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="hb_tf_bench_") as directory:
        rows = []
        for label, fn in (
                ("hbcore -np 1", lambda: run_hbcore(args, 1, directory)),
                ("hbcore -np 2", lambda: run_hbcore(args, 2, directory)),
                ("MultiWorkerMirroredStrategy, 2 workers",
                 lambda: run_mwms(args, 2, directory)),
                ("2 processes, no gradient exchange (bound)",
                 lambda: run_hbcore(args, 2, directory, exchange=False))):
            print("running %s ..." % label, flush=True)
            rows.append((label, fn()))
    print_table(args, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({label: r for label, r in rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
