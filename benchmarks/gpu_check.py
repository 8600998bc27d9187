"""The GPU path, checked on a GPU, in one command.

    python benchmarks/gpu_check.py                # np 1, then np 2
    python benchmarks/gpu_check.py --quick        # small sizes (smoke run)
    ... --np 1,2,4 --json out.json --timeout 600

It launches ``hbrun -np N python benchmarks/_gpu_check_rank.py`` for each
N (one job after the other), and prints one table of checks, each PASS /
FAIL / NOT RUN / N/A with the numbers it compared (or why), then the
allreduce bandwidth of the NCCL path beside the host path. Every rank
runs, on GPU ``local_rank % (GPUs it sees)``:

- numpy API on hbcore.GpuArray device memory: allreduce (six dtypes, five
  ops, scale factors, a 32 MiB tensor), grouped allreduce, allgather of
  uneven rows, broadcast from the last rank, alltoall with uneven splits,
  reducescatter of uneven blocks, an in-place allreduce_; all against
  numpy on every rank's inputs;
- TensorFlow (hbcore_tf's GPU kernels): the same collectives eagerly, in
  one tf.function and in one tf.compat.v1 graph, each result against numpy
  and checked to be on the GPU; Keras model.fit in mixed_float16 with
  hvd.DistributedOptimizer(SGD) (same weights on every rank); a
  ShardedEmbedding lookup and SGD step against numpy;
- bandwidth: in-place float32 allreduces of 1 MiB to 256 MiB (``--quick``:
  64 KiB and 1 MiB) through NCCL and through the host path (numpy arrays:
  MPI and shared memory), bus bandwidth = bytes * 2 (n - 1) / n / time (at
  one rank, bytes / time: no data crosses between ranks).

Ranks that share a GPU (np 2 on a one-GPU machine): NCCL cannot run two
ranks of a communicator on one device, and hbcore refuses at the set-up of
the NCCL communicator (the first GPU collective), on every rank, with
UnsupportedError (TF: UnimplementedError) naming the ranks and the GPU's
PCI bus id. Such a job checks that refusal, that it comes within seconds,
and that CPU collectives still work; the other GPU checks are N/A and the
bandwidth table has the host path only.

Exit status: 0 when every check ran on a GPU and passed; 1 when a check
failed or a job failed or timed out; 2 when none failed but some did not
run on a GPU (no GPU, no hbcore GPU support, a TensorFlow without CUDA).
``--tf-on-cpu`` runs the TensorFlow checks on the CPU where TensorFlow has
no GPU (it tests the checks, not the GPU kernels: still exit 2);
``--no-tf`` leaves TensorFlow out.

Environment: HB_NCCL_LIBRARY and HB_CUDA_RUNTIME_LIBRARY are passed on to
the jobs (docs/gpu.md); every other HB_* setting is not (as for every
benchmark here). tests/test_gpu_check.py runs this command on the fake
CUDA runtime and NCCL of tests/fake_gpu.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import HERE, hbrun, run, worker_env  # noqa: E402

RANK_SCRIPT = os.path.join(HERE, "_gpu_check_rank.py")
PASSED_ON = ("HB_NCCL_LIBRARY", "HB_CUDA_RUNTIME_LIBRARY")
PASS, FAIL, NOT_RUN, NA = "PASS", "FAIL", "NOT RUN", "N/A"

Row = Dict[str, Any]


def read_ranks(out_dir: str, np_: int) -> Dict[int, List[Row]]:
    """Each rank's rows.

    Args:
        out_dir: where the ranks wrote ``rank<r>.jsonl``.
        np_: the job's ranks.

    Returns:
        rank -> its rows; a rank that wrote nothing is absent.
    """
    ranks = {}
    for rank in range(np_):
        path = os.path.join(out_dir, "rank%d.jsonl" % rank)
        if os.path.exists(path):
            with open(path) as f:
                ranks[rank] = [json.loads(line) for line in f if line.strip()]
    return ranks


def merge(np_: int, ranks: Dict[int, List[Row]],
          job_error: Optional[str]) -> Tuple[List[Row], List[Row], List[Row]]:
    """Merges the ranks' rows of one job.

    A check passes when it passed on every rank; a rank that did not
    report it (the job died or hung) fails it.

    Args:
        np_: the job's ranks.
        ranks: rank -> its rows (read_ranks).
        job_error: why the job failed (exit status, timeout), or None.

    Returns:
        (checks, bandwidth rows, info rows): each check with ``np``,
        ``section``, ``check``, ``device``, ``status`` and ``detail``.
    """
    keys: List[Tuple[str, str]] = []
    by_rank: Dict[Tuple[str, str], Dict[int, Row]] = {}
    for rank in sorted(ranks):
        for row in ranks[rank]:
            if row["kind"] != "check":
                continue
            key = (row["section"], row["check"])
            if key not in by_rank:
                keys.append(key)
                by_rank[key] = {}
            by_rank[key][rank] = row
    checks = []
    for key in keys:
        rows = by_rank[key]
        first = rows[min(rows)]
        missing = [r for r in range(np_) if r not in rows]
        failed = [r for r in sorted(rows) if rows[r]["status"] == FAIL]
        if missing:
            status, detail = FAIL, ("rank %d did not report it (the job "
                                    "failed)" % missing[0])
        elif failed:
            status, detail = FAIL, "rank %d: %s" % (
                failed[0], rows[failed[0]]["detail"])
        elif len({row["status"] for row in rows.values()}) > 1:
            status, detail = FAIL, "ranks disagree: " + ", ".join(
                "rank %d %s" % (r, rows[r]["status"]) for r in sorted(rows))
        else:
            status, detail = first["status"], first["detail"]
        checks.append({"np": np_, "section": key[0], "check": key[1],
                       "device": first["device"], "status": status,
                       "detail": detail})
    if job_error is not None:
        checks.append({"np": np_, "section": "job",
                       "check": "hbrun -np %d" % np_, "device": "-",
                       "status": FAIL, "detail": job_error})
    bandwidth = [row for rows in ranks.values() for row in rows
                 if row["kind"] == "bandwidth"]
    info = [row for rank in sorted(ranks) for row in ranks[rank]
            if row["kind"] == "info"]
    return checks, bandwidth, info


def verdict(checks: Sequence[Row]) -> Tuple[int, str]:
    """The exit status and the last line: 1 if anything failed, 2 if
    nothing failed but something did not run, else 0."""
    failed = [c for c in checks if c["status"] == FAIL]
    not_run = [c for c in checks if c["status"] == NOT_RUN]
    if failed:
        return 1, "gpu_check: FAIL (%d of %d checks failed)" % (
            len(failed), len(checks))
    if not_run:
        reasons = sorted({c["detail"] for c in not_run})
        return 2, ("gpu_check: INCOMPLETE (nothing failed; %d checks did "
                   "not run on a GPU: %s)" % (len(not_run),
                                              "; ".join(reasons)))
    if not checks:
        return 1, "gpu_check: FAIL (no check ran)"
    return 0, "gpu_check: PASS (%d checks ran and passed)" % len(checks)


def check_lines(checks: Sequence[Row]) -> List[str]:
    """The checks table; consecutive NOT RUN / N/A rows of one section
    with the same reason are one line."""
    lines = ["%-3s %-22s %-44s %-6s %-8s %s" % (
        "np", "section", "check", "device", "result", "compared / why")]
    i = 0
    while i < len(checks):
        c, j = checks[i], i + 1
        if c["status"] in (NOT_RUN, NA):
            while j < len(checks) and all(
                    checks[j][k] == c[k] for k in ("np", "section", "status",
                                                   "detail")):
                j += 1
        name = c["check"] if j == i + 1 else "(%d checks)" % (j - i)
        lines.append("%-3d %-22s %-44s %-6s %-8s %s" % (
            c["np"], c["section"], name, c["device"], c["status"],
            c["detail"]))
        i = j
    return lines


def bandwidth_lines(rows: Sequence[Row]) -> List[str]:
    """The bandwidth table: NCCL beside the host path, per job and size."""
    lines = ["allreduce, float32 Sum in place: NCCL (device memory) vs the "
             "host path (numpy arrays: MPI / shared memory); median of the "
             "slowest rank",
             "%-3s %11s %10s %14s %10s %14s" % (
                 "np", "bytes", "NCCL us", "NCCL busbw GB/s", "host us",
                 "host busbw GB/s")]
    for r in rows:
        if "nccl_s" in r:
            nccl = "%10.1f %14.3f" % (r["nccl_s"] * 1e6, r["nccl_busbw_GBps"])
        else:
            nccl = "%25s" % "-"
        lines.append("%-3d %11d %s %10.1f %14.3f" % (
            r["np"], r["bytes"], nccl, r["host_s"] * 1e6,
            r["host_busbw_GBps"]))
    for why in sorted({"np %d: no NCCL figures: %s" % (r["np"], r["nccl_why"])
                       for r in rows if "nccl_why" in r}):
        lines.append(why)
    if any(r["np"] == 1 for r in rows):
        lines.append("np 1: bytes / time (one rank moves no data between "
                     "ranks; the figure is the call's cost)")
    return lines


def info_lines(info: Sequence[Row]) -> List[str]:
    """What each job ran on: libraries, and each rank's GPU."""
    lines = []
    for row in info:
        if row["rank"] == 0:
            lines.append("NCCL %s (%s); CUDA runtime %s (%s); %s GPU(s)" % (
                row["nccl"], row["nccl_library"], row["cuda_runtime"],
                row["cuda_runtime_library"], row["cuda_devices"]))
        where = ("GPU %d (PCI bus id %s)" % (row["device"], row["bus_id"])
                 if row["device"] >= 0 else "no GPU: " + row["no_gpu"])
        lines.append("  rank %d on %s: %s" % (row["rank"], row["host"],
                                              where))
    return lines


def run_job(np_: int, options: Sequence[str], env: Dict[str, str],
            timeout: float) -> Tuple[Dict[int, List[Row]], Optional[str]]:
    """Runs one hbrun job of the rank script.

    Args:
        np_: ranks.
        options: the rank script's flags (--quick, --tf-on-cpu, --no-tf).
        env: the job's environment.
        timeout: seconds before the job is killed.

    Returns:
        (rank -> its rows, why the job failed or None when it exited 0).
    """
    out_dir = tempfile.mkdtemp(prefix="gpu_check_np%d_" % np_)
    try:
        error = None
        try:
            run([hbrun(np_, [RANK_SCRIPT, "--out", out_dir] + list(options))],
                [env], timeout, "hbrun -np %d" % np_)
        except SystemExit as exc:  # the job failed or timed out
            error = str(exc)
        return read_ranks(out_dir, np_), error
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the jobs and prints the tables.

    Returns:
        The exit status (see the module doc).
    """
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", default="1,2",
                        help="rank counts, one job each (default 1,2)")
    parser.add_argument("--quick", action="store_true",
                        help="small tensors and bandwidth sizes")
    parser.add_argument("--tf-on-cpu", action="store_true",
                        help="where TensorFlow sees no GPU, run its checks "
                             "on the CPU (tests the checks only)")
    parser.add_argument("--no-tf", action="store_true",
                        help="leave TensorFlow out")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds per job (default 600)")
    parser.add_argument("--json", help="also write every row here")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.np.split(",")]
    options = [flag for flag, on in (("--quick", args.quick),
                                     ("--tf-on-cpu", args.tf_on_cpu),
                                     ("--no-tf", args.no_tf)) if on]
    # The GPU libraries' locations go to the jobs; worker_env drops the
    # other HB_* settings of this shell (and says so).
    passed = {k: os.environ.pop(k) for k in PASSED_ON if k in os.environ}
    env = worker_env(passed)
    checks, bandwidth, info = [], [], []
    for np_ in counts:
        print("gpu_check: hbrun -np %d ..." % np_, flush=True)
        ranks, error = run_job(np_, options, env, args.timeout)
        if error:
            print(error, file=sys.stderr)
        c, b, i = merge(np_, ranks, error)
        checks += c
        bandwidth += b
        info += i
    code, last = verdict(checks)
    print("\n".join(info_lines(info) + [""] + check_lines(checks) + [""] +
                    bandwidth_lines(bandwidth) + ["", last]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"checks": checks, "bandwidth": bandwidth,
                       "info": info, "exit": code}, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
