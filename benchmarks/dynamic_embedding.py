"""Dynamic embedding tables (no vocabulary) against TFRA's, hbcore's fixed
sharded table and a plain hashed Keras Embedding: same model, same
optimizer, same ids, one run, one table.

    python benchmarks/dynamic_embedding.py              # ~10-20 minutes
    python benchmarks/dynamic_embedding.py --quick      # smoke run
    ... --tfra-python /tmp/venv-tfra/bin/python          # TFRA's venv
    ... --json out.json                                  # also save numbers

The script is its own driver: it launches itself once per row (under
``hbrun -np N`` for hbcore's rows) and prints one table.

Stream (Criteo-like): --features id features per example, each an int64
id over [0, 2^40): a Zipf(--zipf) popularity rank, hashed (a
multiplicative hash of rank and feature, top 40 bits), and with
probability --new-rate a brand-new id that no rank saw before (the steady
arrival of new ids). Rank r's batch of step s comes from a generator
seeded by (r, s); the driver writes each rank's ids to a .npy file that
every row's workers read (numpy's Zipf sampler differs between versions,
and TFRA's venv has an older numpy), so every row of the table trains on
the same ids. The driver also counts the distinct ids of a run (all
ranks, warm-up included): the row count the dynamic table ends with.

Model (tf_keras, TF_USE_LEGACY_KERAS=1, since TFRA's optimizer wrapper
rejects Keras 3 optimizers): ids [batch, features] -> one table of dim
--dim (shared by the features) -> flatten -> 64-32-1 MLP, sigmoid
cross-entropy, Adagrad(0.05), ``model.fit`` on a tf.data pipeline of the
pre-generated batches, one intra-op and one inter-op TF thread per
process. Rows:

  (a) dynamic: ``hb.keras.layers.DynamicEmbedding`` (raw ids, capacity
      per rank 1.2x its share of the distinct ids), under
      ``hbcore_tf.keras.DistributedOptimizer``, at -np 1, 2, 3;
  (b) fixed: ``hb.keras.layers.ShardedEmbedding`` with as many rows as
      the dynamic table ends with, ids hashed into it (``id % rows``),
      same optimizer wrapper, at -np 1, 2, 3;
  (c) TFRA: ``tfra.dynamic_embedding.keras.layers.Embedding`` under
      ``DynamicEmbeddingOptimizer`` (tensorflow-recommenders-addons
      0.8.1, TF 2.16.2, its own venv given by --tfra-python), one
      process; -np 2 and 3 need Horovod (``HvdAllToAllEmbedding``) and
      are not run;
  (d) plain: ``keras.layers.Embedding(rows, dim)`` over the hashed ids in
      one process (no hbcore): the floor.

TFRA needs TensorFlow 2.16.2, hbcore's venv may have a newer one. When
TFRA imports, (d) also runs in TFRA's venv (d'), and so does (a) at -np 1
(a') when hbcore imports there too (hbcore on PYTHONPATH; hbcore_tf
compiles its op library for that TensorFlow on first use): the targets
against (c) then compare (c) with (a') of the same TensorFlow.

Columns: samples/s over all ranks (the slowest rank's timed window);
rows (the table's rows at the end, all ranks); peak RSS per rank (the
largest rank's ru_maxrss); bytes/row: the RSS above what the process held
once TensorFlow was up, before the model (the part the table, its
Adagrad slot, the model and the pre-generated ids drive), divided by the
rows the rank holds, the largest over the ranks.

Every row runs --rounds times (default 3), a round running each row once,
the order reversed every other round: this machine's speed drifts by
minutes (other work shares its 2 CPUs), so a row's samples/s is the
median over the rounds and each ratio the median of its per-round
ratios (printed beside it); peak RSS and bytes/row are the largest.

Targets: (a) >= 2x (c) in samples/s at every rank count, (a) bytes/row
<= (c)'s; (a) within 1.3x of (b) (samples/s ratio >= 0.77) at every rank
count. A "bound" row stands where this machine cannot show a target.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

from _launch import WORKER_CWD, hbrun, run, worker_env

GOLDEN = 0x9E3779B97F4A7C15
ID_BITS = 40
RANKS = (1, 2, 3)
DEFAULT_TFRA = "/tmp/venv-tfra/bin/python"


# --- the id stream (driver and workers) --------------------------------------

def batch_ids(args: argparse.Namespace, rank: int, step: int):
    """Rank ``rank``'s ids of step ``step``: int64 [batch, features] over
    [0, 2^40)."""
    import numpy as np

    rng = np.random.default_rng([11, rank, step])
    shape = (args.batch_size, args.features)
    popular = rng.zipf(args.zipf, size=shape).astype(np.uint64)
    # A new id: a counter no other (rank, step, slot) uses, far above any
    # Zipf rank, hashed like the rest.
    fresh = (np.uint64(1 << 52) + np.uint64(
        (rank * 1_000_000 + step) * shape[0] * shape[1]) +
        np.arange(shape[0] * shape[1], dtype=np.uint64).reshape(shape))
    source = np.where(rng.random(shape) < args.new_rate, fresh, popular)
    feature = np.arange(shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = (source * np.uint64(args.features) + feature) * \
            np.uint64(GOLDEN)
    return (mixed >> np.uint64(64 - ID_BITS)).astype(np.int64)


def write_ids(args: argparse.Namespace, ranks: int, directory: str) -> int:
    """Writes rank r's ids of every step (warm-up first) to
    ``directory/rank<r>.npy``; returns the number of distinct ids."""
    import numpy as np

    os.makedirs(directory, exist_ok=True)
    every = []
    for rank in range(ranks):
        ids = np.concatenate([batch_ids(args, rank, s)
                              for s in range(args.warmup + args.steps)])
        np.save(os.path.join(directory, "rank%d.npy" % rank), ids)
        every.append(ids.ravel())
    return int(np.unique(np.concatenate(every)).size)


# --- workers -----------------------------------------------------------------

def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _table(args: argparse.Namespace, keras, size: int):
    """The embedding layer of ``args.worker`` and whether the ids are
    hashed into ``args.rows`` first."""
    import tensorflow as tf

    init = keras.initializers.RandomUniform(-0.05, 0.05, seed=1)
    if args.worker == "dynamic":
        import hbcore_tf as hb
        capacity = int(1.2 * args.rows / size) + 1024
        return hb.keras.layers.DynamicEmbedding(
            args.dim, embeddings_initializer=init, capacity=capacity,
            name="emb"), False
    if args.worker == "fixed":
        import hbcore_tf as hb
        return hb.keras.layers.ShardedEmbedding(
            args.rows, args.dim, embeddings_initializer=init,
            name="emb"), True
    if args.worker == "tfra":
        import tensorflow_recommenders_addons as tfra
        return tfra.dynamic_embedding.keras.layers.Embedding(
            args.dim, key_dtype=tf.int64, value_dtype=tf.float32,
            initializer=init, init_capacity=int(1.2 * args.rows),
            name="emb"), False
    return keras.layers.Embedding(args.rows, args.dim,
                                  embeddings_initializer=init,
                                  name="emb"), True


def _optimizer(args: argparse.Namespace, keras):
    opt = keras.optimizers.Adagrad(0.05)
    if args.worker in ("dynamic", "fixed"):
        import hbcore_tf.keras as hvd
        return hvd.DistributedOptimizer(opt)
    if args.worker == "tfra":
        import tensorflow_recommenders_addons as tfra
        return tfra.dynamic_embedding.DynamicEmbeddingOptimizer(opt)
    return opt


def _rows_held(args: argparse.Namespace, layer, size: int) -> int:
    if args.worker == "dynamic":
        return int(layer.table.size())
    if args.worker == "tfra":
        return int(layer.params.size())
    return args.rows // size


def run_worker(args: argparse.Namespace) -> None:
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rank, size, gather = 0, 1, (lambda value: [value])
    if args.worker in ("dynamic", "fixed"):
        import hbcore
        import hbcore_tf.keras as hvd
        hvd.init()
        rank, size, gather = hvd.rank(), hvd.size(), hbcore.allgather_object
    ids = np.load(os.path.join(args.ids, "rank%d.npy" % rank))
    labels = ((ids[:, 0] >> 7) & 1).astype(np.float32)
    keras.utils.set_random_seed(0)
    (tf.constant(1.0) + 1.0).numpy()
    # TensorFlow's own memory (libraries, runtime), before the model:
    # the baseline of bytes/row.
    baseline = _rss()
    layer, hashed = _table(args, keras, size)
    if hashed:
        ids = ids % args.rows
    inputs = keras.Input((args.features,), dtype="int64")
    net = keras.layers.Flatten()(layer(inputs))
    for width in (64, 32):
        net = keras.layers.Dense(width, activation="relu")(net)
    model = keras.Model(inputs, keras.layers.Dense(1)(net))
    model.compile(optimizer=_optimizer(args, keras),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    data = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(
        args.batch_size).prefetch(2)
    marks = {}

    class Timer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch in (args.warmup - 1, args.warmup + args.steps - 1):
                marks[batch] = time.perf_counter()

    model.fit(data, epochs=1, verbose=0, callbacks=[Timer()])
    seconds = marks[args.warmup + args.steps - 1] - marks[args.warmup - 1]
    held = _rows_held(args, layer, size)
    rss = _rss()
    result = {"seconds": max(gather(seconds)),
              "samples": args.steps * args.batch_size * size,
              "rows": sum(gather(held)) if args.worker == "dynamic"
              else (held if args.worker == "tfra" else args.rows),
              "peak_rss": max(gather(rss)),
              "bytes_per_row": max(gather((rss - baseline) / max(held, 1))),
              "tf": tf.__version__}
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)
    if size > 1:
        hbcore.barrier()


# --- driver ------------------------------------------------------------------

def _argv(args: argparse.Namespace, worker: str, out: str,
          rows: int, ids: str) -> List[str]:
    return [os.path.abspath(__file__), "--worker", worker, "--out", out,
            "--rows", str(rows), "--ids", ids,
            "--batch-size", str(args.batch_size),
            "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--features", str(args.features), "--dim", str(args.dim),
            "--zipf", str(args.zipf), "--new-rate", str(args.new_rate)]


def launch(args: argparse.Namespace, worker: str, np_: int, rows: int,
           directory: str, round_: int,
           python: Optional[str] = None) -> dict:
    """Runs one row (with ``python``: in that interpreter's venv, one
    process); returns its result."""
    tag = "%s%d%s_r%d" % (worker, np_, "tfra" if python else "", round_)
    out = os.path.join(directory, tag + ".json")
    env = worker_env({"TF_USE_LEGACY_KERAS": "1"})
    argv = _argv(args, worker, out, rows,
                 os.path.join(directory, "ids%d" % np_))
    if python:
        command = [python] + argv
    elif worker in ("dynamic", "fixed"):
        command = hbrun(np_, argv)
    else:
        command = [sys.executable] + argv
    run([command], [env], args.timeout, "%s -np %d" % (tag, np_))
    with open(out) as f:
        return json.load(f)


def import_problem(python: Optional[str], code: str) -> Optional[str]:
    """Why ``code`` (imports) fails in ``python``, or None when it runs."""
    if not python:
        return "no --tfra-python"
    if not os.path.exists(python):
        return "%s does not exist" % python
    probe = subprocess.run(
        [python, "-c", code], env=worker_env({"TF_USE_LEGACY_KERAS": "1"}),
        cwd=WORKER_CWD, capture_output=True, text=True, timeout=600)
    if probe.returncode == 0:
        return None
    lines = [l for l in probe.stderr.strip().splitlines() if l.strip()]
    return lines[-1][:120] if lines else "exit %d" % probe.returncode


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else \
        (ordered[mid - 1] + ordered[mid]) / 2


def _rate(result: dict) -> float:
    return result["samples"] / result["seconds"]


class Rounds:
    """The results of every round: ``runs[key]`` is a row's list of
    results, one per round."""

    def __init__(self) -> None:
        self.runs: Dict[str, List[dict]] = {}

    def add(self, key: str, result: dict) -> None:
        self.runs.setdefault(key, []).append(result)

    def rate(self, key: str) -> float:
        return _median([_rate(r) for r in self.runs[key]])

    def largest(self, key: str, field: str) -> float:
        return max(r[field] for r in self.runs[key])

    def ratio(self, top: str, bottom: str) -> Tuple[float, List[float]]:
        """The median of the per-round samples/s ratios, and those."""
        each = [_rate(a) / _rate(b) for a, b in zip(self.runs[top],
                                                     self.runs[bottom])]
        return _median(each), each


def print_table(args: argparse.Namespace, results: Rounds,
                tfra_why: Optional[str], load: List[float]) -> List[str]:
    """Prints the table; returns the names of the targets missed."""
    mib = 1 << 20
    runs = results.runs
    print("dynamic embedding benchmark (%s): %d id features, Zipf(%.2f) "
          "ids over 2^%d, %.1f%% new ids, dim %d, Adagrad, batch %d per "
          "rank, %d timed steps after %d warm-up, %d round(s)" % (
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              args.features, args.zipf, ID_BITS, 100 * args.new_rate,
              args.dim, args.batch_size, args.steps, args.warmup,
              args.rounds))
    print("load average (1 min) before / after: %.1f / %.1f on %d CPUs" % (
        load[0], load[1], os.cpu_count() or 0))
    print("%-44s %11s %10s %10s %10s  %s" % (
        "row", "samples/s", "rows", "peak RSS", "bytes/row", "TF"))
    labels = [("dynamic%d" % n, "(a) dynamic, -np %d" % n) for n in RANKS]
    labels += [("fixed%d" % n, "(b) fixed sharded, -np %d" % n)
               for n in RANKS]
    labels += [("dynamic1tfra", "(a') dynamic, -np 1, TFRA's venv"),
               ("tfra1", "(c) TFRA de.keras.layers.Embedding, 1 process"),
               ("plain1", "(d) plain hashed Embedding, 1 process"),
               ("plain1tfra", "(d') plain hashed Embedding, TFRA's venv")]
    for key, label in labels:
        if key not in runs:
            if key == "tfra1":
                print("%-44s not importable: %s" % (label, tfra_why))
            continue
        print("%-44s %11.0f %10d %7.0f MiB %10.0f  %s" % (
            label, results.rate(key), runs[key][0]["rows"],
            results.largest(key, "peak_rss") / mib,
            results.largest(key, "bytes_per_row"), runs[key][0]["tf"]))
    for n in RANKS[1:]:
        print("%-44s skipped: needs Horovod (HvdAllToAllEmbedding)" % (
            "(c) TFRA, -np %d" % n))
    checks = []
    for n in RANKS:
        checks.append(("(a) vs (b) samples/s, -np %d" % n,
                       results.ratio("dynamic%d" % n, "fixed%d" % n),
                       ">=", 0.77))
    if "tfra1" in runs:
        a = "dynamic1tfra" if "dynamic1tfra" in runs else "dynamic1"
        checks.append(("(a') vs (c) samples/s, -np 1",
                       results.ratio(a, "tfra1"), ">=", 2.0))
        memory = results.largest(a, "bytes_per_row") / \
            results.largest("tfra1", "bytes_per_row")
        checks.append(("(a') vs (c) bytes/row, -np 1", (memory, []), "<=",
                       1.0))
        if "plain1tfra" in runs:
            floor = runs["plain1tfra"][0]

            def over_floor(key: str) -> float:
                # The plain table's own bytes per row (value + Adagrad
                # accumulator) plus what a row costs above the plain
                # model of the same TF: the fixed part (graph, pipeline,
                # ids) drops out.
                r = runs[key][0]
                return (r["bytes_per_row"] * r["rows"] -
                        floor["bytes_per_row"] * floor["rows"]) / \
                    r["rows"] + 2 * 4 * args.dim
            print("  %-40s %6.0f vs %.0f   (the floor's %d B/row + the "
                  "RSS above (d'), per row; no target)" % (
                      "(a') vs (c) bytes/row above the floor",
                      over_floor(a), over_floor("tfra1"), 8 * args.dim))
    for n in RANKS[1:]:
        print("  %-40s bound: no TFRA run at -np %d (needs Horovod)" % (
            "(a) vs (c) samples/s, -np %d" % n, n))
    print("  %-40s bound: %d ranks on %d CPUs shared with other work "
          "(samples/s cannot scale)" % ("-np 2 and 3", RANKS[-1],
                                        os.cpu_count() or 0))
    for n in RANKS:
        print("  %-40s %6.2f   (no target)" % (
            "(a) vs (d) samples/s, -np %d" % n,
            results.rate("dynamic%d" % n) / results.rate("plain1")))
    failed = []
    for name, (value, each), op, target in checks:
        ok = value >= target if op == ">=" else value <= target
        print("  %-40s %6.2f   target %s %.2f   %s%s" % (
            name, value, op, target, "PASS" if ok else "FAIL",
            "   rounds: " + " ".join("%.2f" % v for v in each)
            if len(each) > 1 else ""))
        if not ok:
            failed.append(name)
    print("targets: %d PASS, %d FAIL" % (len(checks) - len(failed),
                                         len(failed)))
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", default=None,
                        choices=["dynamic", "fixed", "tfra", "plain"])
    parser.add_argument("--out", default=None)
    parser.add_argument("--rows", type=int, default=0,
                        help="(workers) the table's row count")
    parser.add_argument("--ids", default=None,
                        help="(workers) the folder of the ranks' ids")
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--zipf", type=float, default=1.2)
    parser.add_argument("--new-rate", type=float, default=0.01,
                        help="share of ids that are brand new")
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of every row, in alternating order")
    parser.add_argument("--tfra-python", default=DEFAULT_TFRA,
                        help="the interpreter of TFRA's venv (docs/"
                        "benchmarks.md says how to make it)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--quick", action="store_true",
                        help="small batches, few steps, one round (a "
                        "smoke run)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return 0
    if args.quick:
        args.batch_size, args.steps, args.warmup, args.rounds = 256, 8, 2, 1
    load = [os.getloadavg()[0]]
    tfra_why = import_problem(
        args.tfra_python, "import tensorflow_recommenders_addons as t; "
        "t.dynamic_embedding.keras.layers.Embedding")
    # hbcore beside TFRA: (a) at -np 1 with TFRA's TensorFlow.
    hbcore_why = tfra_why or import_problem(
        args.tfra_python, "import hbcore_tf.keras as k; k.init()")
    # Every row of a round: (key, worker, -np, interpreter or None).
    rows_of_round = []
    for n in RANKS:
        rows_of_round += [("dynamic%d" % n, "dynamic", n, None),
                          ("fixed%d" % n, "fixed", n, None)]
    rows_of_round.append(("plain1", "plain", 1, None))
    if tfra_why is None:
        rows_of_round += [("tfra1", "tfra", 1, args.tfra_python),
                          ("plain1tfra", "plain", 1, args.tfra_python)]
    if hbcore_why is None:
        rows_of_round.append(("dynamic1tfra", "dynamic", 1,
                              args.tfra_python))
    results = Rounds()
    with tempfile.TemporaryDirectory(prefix="hb_dyn_bench_") as directory:
        rows = {n: write_ids(args, n, os.path.join(directory, "ids%d" % n))
                for n in RANKS}
        for k in range(args.rounds):
            # Reversed every other round, so a slow minute of the machine
            # does not always fall on the same rows.
            order = rows_of_round if k % 2 == 0 else rows_of_round[::-1]
            for key, worker, n, python in order:
                results.add(key, launch(args, worker, n, rows[n],
                                        directory, k, python))
    load.append(os.getloadavg()[0])
    failed = print_table(args, results, tfra_why, load)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results.runs, "tfra": tfra_why or "ran",
                       "load": load}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
