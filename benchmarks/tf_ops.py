"""The TensorFlow ops' speed: hbcore_tf against the one-buffer MPI floor,
hbcore's numpy API and (when importable) Horovod, in one run, one table.

    python benchmarks/tf_ops.py             # ~1-2 minutes
    python benchmarks/tf_ops.py --quick     # smoke run
    ... --json out.json                                  # also save numbers

The script is its own driver: it runs ``hbrun -np 2`` of itself with
hbcore_tf, then (if ``horovod.tensorflow`` imports in this environment) with
Horovod, and again, alternating (``--rounds``, 3 by default), and prints one
table. Every worker job times its own references with mpi4py on the same
machine at the same time. The time columns are medians over jobs; the
``added`` ratios and the targets are taken within each job (a same-run
ratio: this VM's speed, the floor's included, moves between jobs by up to
30%) and the median job decides, with every job's value printed beside
it. The hbcore/Horovod columns come from alternating jobs.

The step: 200 float32 tensors of 16 KiB plus 4 of 4 MiB (one after every
50), 20.1 MB in all, the shape of a gradient step. Inside a
``tf.function`` the tensors are made fresh from variables (``-v``), as a
backward pass makes gradients, and reduced; the function returns one scalar
made from every result (so nothing is pruned, and the call does not hand
204 tensors back to Python). The results are checked against the expected
sums before timing.

Rows (median over repetitions of the slowest rank; a repetition starts
after a barrier; the rows of one job are interleaved):
  one-buffer MPI floor      one in-place MPI Allreduce of the 20.1 MB,
                            concatenated beforehand (mpi4py).
  per-tensor MPI            204 in-place mpi4py Allreduce calls.
  tf.function, no collective  the same function with IdentityN in place
                            of the collective (all 204 tensors alive at
                            once, as for a collective): what TF costs.
  grouped_allreduce         ``hvd.grouped_allreduce`` of the 204 tensors.
  per-tensor allreduce      204 ``hvd.allreduce`` calls in the function
                            (they must fuse in the runtime).
  numpy API                 hbcore only: 204 ``hbcore.allreduce_async_``
                            (in place), then synchronize (allreduce.py's
                            gradient step).
  4 B eager allreduce       one ``hvd.allreduce`` of a 4-byte tensor,
                            eagerly, right after a barrier; numpy API and
                            mpi4py the same way.
  204 x 4 B                 the step's 204 tensors with one element each,
                            through the same tf.function without and with
                            ``grouped_allreduce``, and (hbcore) through
                            ``hbcore.grouped_allreduce_``: what each path
                            costs per tensor when there is no data to move.

Columns: ``x floor`` is the row's time over the floor; ``added`` is what
the collective adds to the step, (row - no-collective row) / floor, which
leaves out TF's own cost of the function (the same for every library).

Targets (issue 13, 2 ranks): grouped_allreduce adds <= 1.3x the floor;
per-tensor allreduce adds <= 1.5x the floor; 4 B eager allreduce <= 60 us
and (issue 49) at most 2 eager ``tf.identity`` plus one mpi4py 4 B
Allreduce ("4 B eager tf.identity" row: ``tf.identity`` of the same
tensor, timed the same way).
"""
import argparse
import importlib.util
import json
import os
import shlex
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

from _launch import hbrun, print_and_save, run, worker_env

KIB = 1024
MIB = 1024 * KIB
SMALL_COUNT, SMALL_BYTES = 200, 16 * KIB
LARGE_EVERY, LARGE_BYTES = 50, 4 * MIB

TARGET_GROUPED_OVER_FLOOR = 1.3
TARGET_PER_TENSOR_OVER_FLOOR = 1.5
TARGET_EAGER_LATENCY_US = 60.0
# Issue 49: the 4 B eager allreduce within this many eager tf.identity calls
# plus one mpi4py 4 B Allreduce, all timed in the same job.
TARGET_EAGER_IDENTITIES = 2.0


# --- worker -----------------------------------------------------------------

def step_sizes() -> List[int]:
    """Element counts of the step's tensors, in submission order."""
    sizes = []
    for i in range(SMALL_COUNT):
        sizes.append(SMALL_BYTES // 4)
        if (i + 1) % LARGE_EVERY == 0:
            sizes.append(LARGE_BYTES // 4)
    return sizes


def run_worker(args: argparse.Namespace) -> None:
    import numpy as np

    if args.worker == "horovod":
        import horovod.tensorflow as hvd
    else:
        import hbcore_tf as hvd
    import tensorflow as tf

    # Two ranks share two cores: one compute thread each, so TF's own ops
    # and the runtimes' threads do not fight over the cores.
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    hvd.init()
    import mpi4py
    mpi4py.rc.initialize = False  # the runtime initialised MPI
    from mpi4py import MPI

    from _timing import measure

    comm = MPI.COMM_WORLD
    rank, size = hvd.rank(), hvd.size()
    expected = size * (size + 1) / 2.0
    sizes = step_sizes()
    variables = [tf.Variable(tf.fill([n], float(rank + 1))) for n in sizes]

    def gradients(of=variables):
        # Fresh tensors, as a backward pass makes them: the collective is
        # their only consumer (a variable's read value is not: it shares
        # the variable's buffer).
        return [tf.negative(v) for v in of]

    def sink(tensors):
        # One scalar from every tensor, returned, so that nothing is pruned
        # and the call does not hand 204 tensors back to Python.
        return tf.add_n([t[0] for t in tensors])

    @tf.function
    def tf_only():
        # All 204 tensors alive at once, as they are for a grouped
        # collective (TF's allocator behaves differently otherwise).
        return sink(tf.raw_ops.IdentityN(input=gradients()))

    def grouped_values():
        return hvd.grouped_allreduce(gradients(), op=hvd.Sum)

    def per_tensor_values():
        return [hvd.allreduce(g, op=hvd.Sum, name="bench.pt%d" % i)
                for i, g in enumerate(gradients())]

    @tf.function
    def grouped():
        return sink(grouped_values())

    @tf.function
    def per_tensor():
        return sink(per_tensor_values())

    # The same 204 tensors with one element each: what the path costs per
    # tensor, with no data to move.
    tiny_variables = [tf.Variable([float(rank + 1)]) for _ in sizes]

    @tf.function
    def tiny_tf_only():
        return sink(tf.raw_ops.IdentityN(input=gradients(tiny_variables)))

    @tf.function
    def tiny_grouped():
        return sink(hvd.grouped_allreduce(gradients(tiny_variables), op=hvd.Sum))

    got = float(tiny_grouped())
    if got != -expected * len(sizes):
        raise AssertionError("tiny grouped step: %r, expected %r" % (
            got, -expected * len(sizes)))

    for values in (tf.function(grouped_values), tf.function(per_tensor_values)):
        for got in values():
            if not np.all(got.numpy() == -expected):
                raise AssertionError("%s: wrong result, expected %r" % (
                    values.__name__, -expected))

    flat = np.zeros(sum(sizes), np.float32)
    buffers = [np.zeros(n, np.float32) for n in sizes]
    names = ["bench.np%d" % i for i in range(len(sizes))]

    def floor():
        comm.Allreduce(MPI.IN_PLACE, flat)

    def per_tensor_mpi():
        for b in buffers:
            comm.Allreduce(MPI.IN_PLACE, b)

    fns = {"floor": floor, "per_tensor_mpi": per_tensor_mpi,
           "tf_only": lambda: tf_only().numpy(),
           "grouped": lambda: grouped().numpy(),
           "per_tensor": lambda: per_tensor().numpy()}
    if args.worker == "hbcore":
        import hbcore

        def numpy_step():
            handles = [hbcore.allreduce_async_(b, op=hbcore.Sum, name=n)
                       for b, n in zip(buffers, names)]
            for h in handles:
                hbcore.synchronize(h)

        fns["numpy"] = numpy_step
    keys = list(fns)
    times = measure(comm, [fns[k] for k in keys], args.reps,
                    warmup=args.warmup)
    result: Dict[str, Optional[float]] = dict(zip(keys, times))

    one = tf.constant([1.0])
    small = np.ones(1, np.float32)
    small_out = np.empty_like(small)

    def eager():
        hvd.allreduce(one, op=hvd.Sum)

    def mpi4():
        comm.Allreduce(small, small_out)

    def identity4():
        tf.identity(one)

    latency = {"eager4": eager, "mpi4": mpi4, "identity4": identity4}
    if args.worker == "hbcore":
        latency["numpy4"] = lambda: hbcore.allreduce(small, op=hbcore.Sum,
                                                     name="bench.single4")
    keys = list(latency)
    result.update(zip(keys, measure(comm, [latency[k] for k in keys],
                                    args.latency_reps, warmup=args.warmup)))

    # Timed apart from the latencies, which a 204-op function run just
    # before would disturb.
    tiny_arrays = [np.ones(1, np.float32) for _ in sizes]
    tiny = {"tiny_tf_only": lambda: tiny_tf_only().numpy(),
            "tiny_grouped": lambda: tiny_grouped().numpy()}
    if args.worker == "hbcore":
        tiny["tiny_numpy"] = lambda: hbcore.grouped_allreduce_(
            tiny_arrays, op=hbcore.Sum, name="bench.tiny")
    keys = list(tiny)
    result.update(zip(keys, measure(comm, [tiny[k] for k in keys],
                                    args.reps, warmup=args.warmup)))
    got = float(hvd.allreduce(one, op=hvd.Sum)[0])
    if got != size:
        raise AssertionError("eager allreduce: %r, expected %r" % (got, size))
    result["tf_version"] = tf.__version__
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)


# --- driver -----------------------------------------------------------------

def horovod_available() -> bool:
    return importlib.util.find_spec("horovod") is not None and \
        importlib.util.find_spec("horovod.tensorflow") is not None


def run_job(args: argparse.Namespace, impl: str, directory: str,
            index: int) -> dict:
    out = os.path.join(directory, "%s%d.json" % (impl, index))
    argv = [os.path.abspath(__file__), "--worker", impl, "--out", out,
            "--reps", str(args.reps), "--latency-reps",
            str(args.latency_reps), "--warmup", str(args.warmup),
            "--threads", str(args.threads)]
    run([hbrun(args.np, argv, shlex.split(args.hbrun_args))],
        [worker_env()], args.timeout, "%s -np %d" % (impl, args.np))
    with open(out) as f:
        return json.load(f)


def median_of(results: List[dict], key: str) -> Optional[float]:
    """The median over jobs of ``key`` (the upper one of an even count)."""
    values = sorted(r[key] for r in results if r.get(key) is not None)
    return values[len(values) // 2] if values else None


def added_per_job(results: List[dict], key: str) -> List[float]:
    """(row - no-collective row) / floor, within each job: a same-run ratio
    (the VM's speed moves between jobs, and moves the floor with it)."""
    return [(r[key] - r["tf_only"]) / r["floor"] for r in results
            if r.get(key) is not None]


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def table(args: argparse.Namespace, results: Dict[str, List[dict]]
          ) -> List[str]:
    impls = list(results)
    tf_version = results[impls[0]][0]["tf_version"]
    lines = ["TF ops benchmark: -np %d, TensorFlow %s, step = %d x %d KiB + "
             "%d x %d MiB float32 (%.1f MB); %d job(s) of each, medians" % (
                 args.np, tf_version, SMALL_COUNT, SMALL_BYTES // KIB,
                 SMALL_COUNT // LARGE_EVERY, LARGE_BYTES // MIB,
                 sum(step_sizes()) * 4 / 1e6, args.rounds) +
             ("; hbrun %s" % args.hbrun_args if args.hbrun_args else ""),
             "times: median over jobs; x floor: time / one-buffer floor; "
             "added: (time - the same tf.function without the collective) "
             "/ floor, taken within each job, median over jobs"]
    lines.append("%-38s" % "row" + "".join(
        "%24s %8s %6s" % (i, "x floor", "added") for i in impls))
    floors = {i: median_of(results[i], "floor") for i in impls}

    def step_row(label: str, key: str, added: bool = False) -> None:
        cells = []
        for i in impls:
            t = median_of(results[i], key)
            if t is None:
                cells.append("%24s %8s %6s" % ("-", "-", ""))
                continue
            extra = ("%.2f" % median(added_per_job(results[i], key))
                     if added else "")
            cells.append("%24s %8.2f %6s" % ("%.3f ms" % (t * 1e3),
                                             t / floors[i], extra))
        lines.append("%-38s" % label + "".join(cells))

    def latency_row(label: str, key: str) -> None:
        cells = []
        for i in impls:
            t = median_of(results[i], key)
            cells.append("%24s %8s %6s" % (
                "-" if t is None else "%.1f us" % (t * 1e6), "", ""))
        lines.append("%-38s" % label + "".join(cells))

    step_row("one-buffer MPI floor", "floor")
    step_row("per-tensor MPI (204 Allreduce)", "per_tensor_mpi")
    step_row("tf.function, no collective", "tf_only")
    step_row("grouped_allreduce in tf.function", "grouped", added=True)
    step_row("per-tensor allreduce in tf.function", "per_tensor", added=True)
    step_row("numpy API (204 async, in place)", "numpy")
    latency_row("4 B eager allreduce", "eager4")
    latency_row("4 B numpy API allreduce", "numpy4")
    latency_row("4 B mpi4py Allreduce", "mpi4")
    latency_row("4 B eager tf.identity", "identity4")
    latency_row("204 x 4 B: tf.function, no collective", "tiny_tf_only")
    latency_row("204 x 4 B: grouped_allreduce in it", "tiny_grouped")
    latency_row("204 x 4 B: numpy grouped_allreduce_", "tiny_numpy")

    hb = "hbcore"
    verdicts = [
        ("grouped_allreduce, added / floor",
         added_per_job(results[hb], "grouped"), TARGET_GROUPED_OVER_FLOOR),
        ("per-tensor allreduce, added / floor",
         added_per_job(results[hb], "per_tensor"),
         TARGET_PER_TENSOR_OVER_FLOOR),
        ("4 B eager allreduce (us)",
         [r["eager4"] * 1e6 for r in results[hb]], TARGET_EAGER_LATENCY_US),
        ("4 B eager / (2 identity + mpi4py)",
         [r["eager4"] / (TARGET_EAGER_IDENTITIES * r["identity4"] + r["mpi4"])
          for r in results[hb]], 1.0)]
    passed = 0
    for label, per_job, target in verdicts:
        value = median(per_job)
        ok = value <= target
        passed += ok
        lines.append("  hbcore %-36s %8.2f   target <= %g   %s   jobs: %s" % (
            label, value, target, "PASS" if ok else "FAIL",
            " ".join("%.2f" % v for v in per_job)))
    lines.append("targets: %d PASS, %d FAIL" % (passed,
                                                 len(verdicts) - passed))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="jobs per implementation, alternating (odd: "
                             "the targets take the median job)")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--latency-reps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="TF intra- and inter-op threads per rank")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 round, few repetitions")
    parser.add_argument("--no-horovod", action="store_true",
                        help="leave Horovod out even when importable")
    parser.add_argument("--hbrun-args", default="",
                        help="extra hbrun arguments for every job, one "
                             "string, e.g. '--mpi-args=\"-bind-to core\"' "
                             "(write --hbrun-args=... when it starts with -)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None, help="also write results")
    parser.add_argument("--worker", choices=["hbcore", "horovod"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return 0
    if args.quick:
        args.rounds, args.reps, args.latency_reps, args.warmup = 1, 8, 50, 2
    impls = ["hbcore"]
    if not args.no_horovod and horovod_available():
        impls.append("horovod")
    results: Dict[str, List[dict]] = {i: [] for i in impls}
    with tempfile.TemporaryDirectory() as directory:
        for index in range(args.rounds):
            for impl in impls:
                results[impl].append(run_job(args, impl, directory, index))
    print_and_save(table(args, results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
