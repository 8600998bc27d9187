"""Keras ``model.fit`` on a communication-heavy model: hbcore's
DistributedOptimizer against TensorFlow's MultiWorkerMirroredStrategy, for
Keras 3 and for tf_keras, in one run, one table.

    python benchmarks/keras_fit.py             # ~3-5 minutes
    python benchmarks/keras_fit.py --quick     # smoke run
    ... --flavors keras3                                    # one flavour
    ... --json out.json                                     # also save numbers

The model: an MLP of wide Dense layers (default 6 x 1024 on 1024 inputs,
5.2M parameters: 21 MB of float32 gradients per step), SGD, random data
(one batch per rank, repeated: the benchmark times training, not input).

Configurations, per Keras flavour (Keras 3; tf_keras with
TF_USE_LEGACY_KERAS=1):
  hbcore -np 2      ``hbrun -np 2``: ``hbcore_tf.keras.DistributedOptimizer``
                    around SGD, ``model.fit`` (steps_per_epoch = steps),
                    BroadcastGlobalVariablesCallback; under HB_TIMELINE.
  MWMS, 2 workers   two processes with TF_CONFIG on localhost ports and
                    tf.distribute.MultiWorkerMirroredStrategy: tf_keras runs
                    ``model.fit`` in the strategy's scope; Keras 3 runs the
                    same step in a custom tf.function loop
                    (``strategy.run``), because Keras 3 ``model.fit`` fails
                    under MWMS in TF 2.21 ("Attempt to convert a value
                    (PerReplica...)").
  bound             ``hbrun -np 2`` without any gradient exchange: the most
                    two processes can reach on this machine.

Every process runs TensorFlow with intra_op_parallelism_threads=1 and
inter_op_parallelism_threads=1, so 2 ranks use the 2 cores alike in every
configuration. Throughput is samples per second over all ranks for the
timed steps (after a warmup fit). Communication is rank 0's timeline:
ALLREDUCE time between two marker collectives around the timed fit,
divided by the wall time between them.

Targets (issue 13, 2 ranks): hbcore >= 1.3x MWMS samples/s, and
communication <= 15% of the step, for each flavour.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from typing import Dict, List

from _launch import free_ports, hbrun, print_and_save, run, worker_env
from tf_training import timeline_overhead

TARGET_VS_MWMS = 1.3
TARGET_COMM_FRACTION = 0.15
FLAVORS = {"keras3": {}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}


# --- workers -------------------------------------------------------------------

def _setup(args: argparse.Namespace):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _model(keras, args: argparse.Namespace):
    layers = [keras.Input((args.width,))]
    layers += [keras.layers.Dense(args.width, activation="relu")
               for _ in range(args.layers - 1)]
    layers.append(keras.layers.Dense(10))
    return keras.Sequential(layers)


def _batch(args: argparse.Namespace, rank: int):
    import numpy as np

    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(args.batch_size, args.width)).astype(np.float32)
    y = rng.integers(0, 10, size=(args.batch_size,)).astype(np.int64)
    return x, y


def _dataset(tf, args: argparse.Namespace, rank: int):
    x, y = _batch(args, rank)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


def _write(args: argparse.Namespace, seconds: float, ranks: int,
           params: int) -> None:
    with open(args.out, "w") as f:
        json.dump({"seconds": seconds, "ranks": ranks, "steps": args.steps,
                   "samples": args.steps * args.batch_size * ranks,
                   "parameters": params}, f)


def run_hbcore_worker(args: argparse.Namespace) -> None:
    tf = _setup(args)
    import numpy as np

    import hbcore
    import hbcore_tf.keras as hvd

    hvd.init()
    keras = tf.keras
    keras.utils.set_random_seed(hvd.rank())
    model = _model(keras, args)
    opt = keras.optimizers.SGD(0.001)
    if args.worker == "hbcore":
        opt = hvd.DistributedOptimizer(opt)
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    data = _dataset(tf, args, hvd.rank())
    callbacks = ([hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
                 if args.worker == "hbcore" else [])
    model.fit(data, steps_per_epoch=args.warmup, epochs=1, verbose=0,
              callbacks=callbacks)

    def mark(name):
        hbcore.allreduce(np.zeros(1, np.float32), name="bench." + name)

    mark("start")
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    mark("end")
    slowest = max(hbcore.allgather_object(seconds))
    if hvd.rank() == 0:
        _write(args, slowest, hvd.size(), int(model.count_params()))
    hvd.shutdown()


def run_mwms_worker(args: argparse.Namespace) -> None:
    tf = _setup(args)
    keras = tf.keras
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = strategy.num_replicas_in_sync
    keras.utils.set_random_seed(0)
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    with strategy.scope():
        model = _model(keras, args)
        opt = keras.optimizers.SGD(0.001)
    if legacy:
        with strategy.scope():
            model.compile(optimizer=opt,
                          loss=keras.losses.SparseCategoricalCrossentropy(
                              from_logits=True))
        # The global batch is split over the workers: each gets its own.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        x, y = _batch(args, task)
        data = tf.data.Dataset.from_tensors((x, y)).repeat().with_options(
            options)
        model.fit(data, steps_per_epoch=args.warmup, epochs=1, verbose=0)
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - start
    else:
        with strategy.scope():
            opt.build(model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none")
        x, y = _batch(args, task)
        x, y = tf.constant(x), tf.constant(y)
        global_batch = args.batch_size * workers

        def replica_step():
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(y, model(x, training=True)),
                    global_batch_size=global_batch)
            variables = model.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables),
                                    variables))
            return loss

        @tf.function
        def step():
            return strategy.reduce(tf.distribute.ReduceOp.SUM,
                                   strategy.run(replica_step), axis=None)

        for _ in range(args.warmup):
            step().numpy()
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        loss.numpy()
        seconds = time.perf_counter() - start
    if task == 0:
        _write(args, seconds, workers, int(model.count_params()))


# --- driver ----------------------------------------------------------------------

def _worker_argv(args: argparse.Namespace, role: str, out: str) -> List[str]:
    return [os.path.abspath(__file__), "--worker", role, "--out", out,
            "--width", str(args.width), "--layers", str(args.layers),
            "--batch-size", str(args.batch_size), "--steps", str(args.steps),
            "--warmup", str(args.warmup)]


def run_hbcore(args: argparse.Namespace, flavor: str, role: str,
               directory: str) -> dict:
    out = os.path.join(directory, "%s-%s.json" % (role, flavor))
    timeline = os.path.join(directory, "%s-%s.trace.json" % (role, flavor))
    env = worker_env(dict(FLAVORS[flavor], HB_TIMELINE=timeline))
    run([hbrun(2, _worker_argv(args, role, out))], [env], args.timeout,
        "%s (%s)" % (role, flavor))
    with open(out) as f:
        result = json.load(f)
    result.update(timeline_overhead(timeline))
    return result


def run_mwms(args: argparse.Namespace, flavor: str, directory: str) -> dict:
    out = os.path.join(directory, "mwms-%s.json" % flavor)
    cluster = {"worker": ["localhost:%d" % p for p in free_ports(2)]}
    commands, envs = [], []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster,
                                "task": {"type": "worker", "index": index}})
        envs.append(worker_env(dict(FLAVORS[flavor], TF_CONFIG=tf_config)))
        commands.append([sys.executable] + _worker_argv(args, "mwms", out))
    run(commands, envs, args.timeout, "MWMS (%s)" % flavor)
    with open(out) as f:
        return json.load(f)


def median_run(results: List[dict]) -> dict:
    """The run with the median time (its communication share with it)."""
    return sorted(results, key=lambda r: r["seconds"])[len(results) // 2]


def table(args: argparse.Namespace, results: Dict[str, Dict[str, dict]]
          ) -> List[str]:
    first = next(iter(next(iter(results.values())).values()))
    lines = ["Keras model.fit benchmark: MLP %d x %d on %d inputs (%.1fM "
             "parameters, %.1f MB of float32 gradients per step), SGD, "
             "per-rank batch %d, %d timed steps, 2 ranks, 1+1 TF threads "
             "per process; median of %d runs" % (
                 args.layers, args.width, args.width,
                 first["parameters"] / 1e6, first["parameters"] * 4 / 1e6,
                 args.batch_size, args.steps, args.rounds),
             "%-10s %-26s %12s %9s %8s" % ("flavour", "configuration",
                                          "samples/s", "step ms", "comm %")]
    verdicts = []
    for flavor, rows in results.items():
        for role, label in (("hbcore", "hbcore -np 2 (fit)"),
                            ("mwms", "MWMS, 2 workers"),
                            ("bound", "bound (no exchange)")):
            r = rows[role]
            comm = ("%.1f" % (100 * r["comm_fraction"])
                    if r.get("comm_fraction") is not None and role == "hbcore"
                    else "")
            lines.append("%-10s %-26s %12.0f %9.1f %8s" % (
                flavor, label, r["samples"] / r["seconds"],
                r["seconds"] / r["steps"] * 1e3, comm))
        hb, mw = rows["hbcore"], rows["mwms"]
        ratio = (hb["samples"] / hb["seconds"]) / (mw["samples"] / mw["seconds"])
        verdicts.append(("%s: hbcore / MWMS samples/s" % flavor, ratio,
                         ">=", TARGET_VS_MWMS, ratio >= TARGET_VS_MWMS))
        comm = hb.get("comm_fraction")
        if comm is not None:
            verdicts.append(("%s: communication share of step" % flavor,
                             comm, "<=", TARGET_COMM_FRACTION,
                             comm <= TARGET_COMM_FRACTION))
    passed = 0
    for label, value, rel, target, ok in verdicts:
        passed += ok
        lines.append("  %-42s %6.2f   target %s %g   %s" % (
            label, value, rel, target, "PASS" if ok else "FAIL"))
    lines.append("targets: %d PASS, %d FAIL" % (passed,
                                                 len(verdicts) - passed))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per rank (per worker)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--flavors", default="keras3,tf_keras")
    parser.add_argument("--rounds", type=int, default=2,
                        help="runs of every configuration, alternating; "
                             "the table shows the median")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", choices=["hbcore", "bound", "mwms"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "mwms":
        run_mwms_worker(args)
        return 0
    if args.worker:
        run_hbcore_worker(args)
        return 0
    if args.quick:
        args.steps, args.warmup, args.rounds = 5, 2, 1
    runs: Dict[str, Dict[str, List[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="hb_fit_bench_") as directory:
        for index in range(args.rounds):
            for flavor in args.flavors.split(","):
                rows = runs.setdefault(flavor, {})
                for role in ("hbcore", "mwms", "bound"):
                    print("round %d: %s (%s) ..." % (index + 1, role, flavor),
                          flush=True)
                    rows.setdefault(role, []).append(
                        run_mwms(args, flavor, directory) if role == "mwms"
                        else run_hbcore(args, flavor, role, directory))
    results = {flavor: {role: median_run(r) for role, r in rows.items()}
               for flavor, rows in runs.items()}
    print_and_save(table(args, results), runs, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
