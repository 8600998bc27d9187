"""Horovod + Gloo elastic reference rows for benchmarks/elastic.py.

elastic.py calls ``measure_all(args)`` and ``table_lines(...)``; when
Horovod with TensorFlow and Gloo is importable in the running python (a
build as in docs/benchmarks.md ("Building Horovod 0.28.1 for the
comparison")), Horovod elastic is measured in the same run on the same
machine, else one line says why not.

What a Horovod user would write: ``horovod.tensorflow`` (Horovod has no
numpy front end), ``horovodrun --gloo --min-np N-1`` (elastic runs only
on Gloo), and one slot on each of N host names that all name this
machine: Horovod starts a worker without ssh when the name resolves to
one of the machine's addresses (runner/gloo_run.py, ``_exec_command``),
and keys its hosts, blacklist included, by the name, so ``localhost``,
``127.0.0.1`` and the host name are three hosts to it.  Rows:

  commit, ObjectState     ``hvd.elastic.ObjectState`` holding the 20 MB
                          float32 numpy array: its ``save()`` keeps a
                          reference (no copy; a step that changes the
                          array in place changes the commit too), then
                          ``check_host_updates()`` broadcasts a tuple.
  commit, TensorFlowState ``hvd.elastic.TensorFlowState`` of one 20 MB
                          ``tf.Variable`` (what a TF model's commit is):
                          ``var.numpy()`` per variable, then the same
                          broadcast.
  step                    Horovod's (Gloo) allreduce of the 20 MB
                          gradient, the share's denominator.
  recovery                the rank on the second host SIGKILLs itself at
                          step 15 (last commit after step 9) in an
                          ObjectState loop over the 20 MB array (replaced
                          each step, never changed in place); from the
                          kill to the first step after the restore, split
                          by marks in every survivor, each part ending at
                          the last survivor's mark: detection (the kill to
                          ``restore()``, run when the failed collective
                          raises HorovodInternalError; a survivor not
                          talking to the killed rank then waits for Gloo's
                          timeout, HOROVOD_GLOO_TIMEOUT_SECONDS, 30 s by
                          default), re-formation (that to the reset
                          callback: ``shutdown()``, ``init()`` and Gloo's
                          new rendezvous, in the surviving processes) and
                          state sync (``sync()``, the broadcast of the
                          20 MB commit).

Horovod keeps commits in memory and has no sharded state, so there is no
sharded-rows row.  Run this file only through elastic.py (its ``--rank``
arguments are the rank side of the jobs).
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Union

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _launch import run, worker_env  # noqa: E402

DENSE_MB = 20
KILL_STEP = 15
TIMEOUT_S = 300
CHECK_S = 120


# --- availability ------------------------------------------------------------

CHECK_LINE = re.compile(r"^\s*\[([X ])\]\s+(\S.*?)\s*$")


def parse_check_build(text: str) -> Dict[str, Dict[str, bool]]:
    """Parses ``horovodrun --check-build``'s report.

    Args:
        text: Its output: sections ("Available Controllers:") of lines
            "[X] Gloo" (built) or "[ ] Gloo" (not).

    Returns:
        Per section name (without the colon), each feature's built flag.
    """
    sections: Dict[str, Dict[str, bool]] = {}
    current: Optional[Dict[str, bool]] = None
    for line in text.splitlines():
        mark = CHECK_LINE.match(line)
        if mark and current is not None:
            current[mark.group(2)] = mark.group(1) == "X"
        elif line.strip().endswith(":"):
            current = sections.setdefault(line.strip()[:-1].strip(), {})
    return sections


def missing_features(sections: Dict[str, Dict[str, bool]]) -> List[str]:
    """What Horovod elastic with TensorFlow on Gloo needs and the build
    lacks (empty when it has all of it)."""
    wanted = [("Available Frameworks", "TensorFlow"),
              ("Available Controllers", "Gloo"),
              ("Available Tensor Operations", "Gloo")]
    return ["%s (%s)" % (name, section) for section, name in wanted
            if not sections.get(section, {}).get(name, False)]


def unavailable() -> Optional[str]:
    """Why Horovod elastic cannot be measured in this python, or None."""
    if importlib.util.find_spec("horovod") is None:
        return ("Horovod is not installed in this python; docs/benchmarks.md "
                "(\"Building Horovod 0.28.1 for the comparison\") builds "
                "it with Gloo")
    check = subprocess.run([sys.executable, "-m", "horovod.runner.launch",
                            "--check-build"], capture_output=True, text=True,
                           errors="replace", timeout=CHECK_S,
                           env=worker_env())
    missing = missing_features(parse_check_build(check.stdout))
    if check.returncode != 0 or missing:
        return "this Horovod lacks %s" % (", ".join(missing) or
                                          "a working --check-build")
    return None


def local_host_names(count: int) -> List[str]:
    """``count`` distinct names of this machine, as Horovod's hosts.

    Raises:
        SystemExit: the machine has fewer names that resolve.
    """
    names: List[str] = []
    for name in ["localhost", "127.0.0.1", socket.gethostname(),
                 socket.getfqdn()]:
        try:
            socket.gethostbyname(name)
        except OSError:
            continue
        if name not in names:
            names.append(name)
    if len(names) < count:
        raise SystemExit("elastic_horovod: %d host names of this machine "
                         "needed, found %s" % (count, names))
    return names[:count]


# --- rank side ---------------------------------------------------------------

def _tf_horovod():
    """Imports TensorFlow (one intra- and one inter-op thread, as hbcore's
    numpy ranks compute on one) and horovod.tensorflow, and inits."""
    import tensorflow as tf
    import horovod.tensorflow as hvd
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    return tf, hvd


def _median_slowest_ms(tf, hvd, fn: Callable[[], object], reps: int,
                       before: Callable[[], object] = lambda: None) -> float:
    """Median over ``reps`` calls of the slowest rank's time of ``fn()``,
    every call started together (an allreduce of one float), each after an
    untimed ``before()``."""
    times = []
    for _ in range(reps):
        before()
        hvd.allreduce(tf.zeros([1]), op=hvd.Sum, name="bench.start")
        start = time.perf_counter()
        fn()
        took = tf.constant([time.perf_counter() - start], tf.float64)
        times.append(float(hvd.allreduce(took, op=hvd.Max,
                                         name="bench.slowest")[0]))
    return 1000.0 * float(np.median(times))


def _dense_floats(scale: int) -> int:
    return DENSE_MB * 2 ** 20 // 4 // scale


def rank_commit(args: argparse.Namespace) -> None:
    tf, hvd = _tf_horovod()
    floats = _dense_floats(args.scale)
    grad = tf.ones([floats])
    step_ms = _median_slowest_ms(
        tf, hvd, lambda: hvd.allreduce(grad, op=hvd.Sum,
                                       name="bench.grad").numpy(), args.reps)
    objects = hvd.elastic.ObjectState(
        bcast_object=hvd.broadcast_object, get_rank=hvd.rank,
        weights=np.ones(floats, np.float32))
    object_ms = _median_slowest_ms(tf, hvd, objects.commit, args.reps)
    variable = tf.Variable(tf.ones([floats]))
    variables = hvd.elastic.TensorFlowState(variables=[variable], step=0)
    # A step's in-place update before each commit, so each reads new values.
    variable_ms = _median_slowest_ms(tf, hvd, variables.commit, args.reps,
                                     before=lambda: variable.assign_add(grad))
    if hvd.rank() == 0:
        with open(os.path.join(args.out, "commit.json"), "w") as f:
            json.dump({"step_ms": step_ms, "object_ms": object_ms,
                       "variable_ms": variable_ms,
                       "dense_mb": floats * 4 / 2 ** 20}, f)


def rank_recovery(args: argparse.Namespace) -> None:
    tf, hvd = _tf_horovod()
    marks: Dict[str, float] = {}
    killer = hvd.rank() == 1  # the second host's one slot

    class MarkedState(hvd.elastic.ObjectState):
        def restore(self) -> None:
            # run_fn calls this when a collective raised
            # HorovodInternalError: the survivor has noticed the loss.
            marks.setdefault("restore", time.time())
            super().restore()

    state = MarkedState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank,
                        step=0, weights=np.ones(_dense_floats(args.scale),
                                                np.float32))
    state.register_reset_callbacks([lambda: marks.setdefault(
        "reset", time.time())])

    @hvd.elastic.run
    def train(state) -> None:
        for state.step in range(state.step, KILL_STEP + 5):
            if "reset" in marks and "first" not in marks:
                marks["first"] = time.time()
            if killer and "reset" not in marks and state.step == KILL_STEP:
                with open(os.path.join(args.out, "kill.json"), "w") as f:
                    json.dump({"kill": time.time()}, f)
                os.kill(os.getpid(), signal.SIGKILL)
            # A new array each step: Horovod's commit keeps a reference.
            state.weights = state.weights + 0 * hvd.allreduce(
                tf.constant(state.weights), op=hvd.Sum,
                name="bench.grad").numpy()
            if state.step % 10 == 9:
                state.step += 1
                state.commit()

    train(state)
    with open(os.path.join(args.out, "recovery.%d.json" % os.getpid()),
              "w") as f:
        json.dump(marks, f)


# --- driver side -------------------------------------------------------------

def horovodrun(np_: int, argv: List[str], hosts: List[str]) -> List[str]:
    """The command line of a Horovod elastic job of ``np_`` workers, one
    slot per host, that goes on with ``np_ - 1``."""
    return ([sys.executable, "-m", "horovod.runner.launch", "-np", str(np_),
             "--min-np", str(np_ - 1), "--gloo", "-H",
             ",".join("%s:1" % h for h in hosts), sys.executable] +
            [os.path.abspath(__file__)] + argv)


def _job(np_: int, what: str, args: argparse.Namespace, out: str) -> None:
    argv = ["--rank", what, "--out", out, "--scale", str(args.scale),
            "--reps", str(args.reps)]
    run([horovodrun(np_, argv, local_host_names(np_))], [worker_env()],
        TIMEOUT_S, "Horovod elastic %s job at %d ranks" % (what, np_))


def measure(np_: int, args: argparse.Namespace) -> dict:
    """Horovod's commit and recovery figures at ``np_`` ranks."""
    out = tempfile.mkdtemp(prefix="hbcore-bench-elastic-horovod-")
    _job(np_, "commit", args, out)
    with open(os.path.join(out, "commit.json")) as f:
        result = json.load(f)
    _job(np_, "recovery", args, out)
    with open(os.path.join(out, "kill.json")) as f:
        kill = json.load(f)["kill"]
    survivors = []
    for path in glob.glob(os.path.join(out, "recovery.*.json")):
        with open(path) as f:
            survivors.append(json.load(f))
    result.update(split_recovery(kill, survivors))
    return result


def split_recovery(kill: float, survivors: List[Dict[str, float]]
                   ) -> Dict[str, float]:
    """Recovery time and its parts from the survivors' marks.

    Each part ends when the last survivor reached its mark: the new world
    forms only when every survivor has noticed the loss.

    Args:
        kill: When the rank killed itself.
        survivors: Per surviving process, when it reached "restore"
            (absent when a host-update notice came first), "reset" and
            "first".

    Returns:
        recovery_s, sync_s and, when every survivor has a "restore" mark,
        detect_s (the last survivor's), detect_first_s (the first's) and
        reform_s.
    """
    last = {mark: max(m[mark] for m in survivors)
            for mark in ("reset", "first")}
    result = {"recovery_s": last["first"] - kill,
              "sync_s": last["first"] - last["reset"]}
    if all("restore" in m for m in survivors):
        restores = [m["restore"] for m in survivors]
        result.update(detect_s=max(restores) - kill,
                      detect_first_s=min(restores) - kill,
                      reform_s=last["reset"] - max(restores))
    return result


def measure_all(args: argparse.Namespace) -> Union[Dict[int, dict], str]:
    """Horovod's figures at 2 and 3 ranks, or why they cannot be taken."""
    reason = unavailable()
    if reason is not None:
        return reason
    return {np_: measure(np_, args) for np_ in (2, 3)}


def _ratio(hbcore: float, horovod: float) -> str:
    return "%9.1f x" % (hbcore / horovod) if horovod > 0 else "-"


def table_lines(hbcore: Dict[int, dict],
                horovod: Union[Dict[int, dict], str]) -> List[str]:
    """The Horovod rows of elastic.py's table (its columns), with
    hbcore / Horovod ratios; one line when Horovod was not measured."""
    if isinstance(horovod, str):
        return ["Horovod + Gloo elastic: not measured (%s)" % horovod]
    row = "%-8d %-38s %12s %12s"
    lines = ["Horovod + Gloo elastic (horovod.tensorflow, horovodrun "
             "--gloo; hosts %s on this machine; ObjectState of the numpy "
             "array, TensorFlowState of a tf.Variable; hbcore / Horovod: "
             "ratio of times, below 1 hbcore is faster)" % ", ".join(
                 local_host_names(max(horovod)))]
    for np_, r in horovod.items():
        mine = hbcore[np_]
        # Each Horovod state beside hbcore's of the same kind: the numpy
        # ObjectState beside hbcore's, TensorFlowState beside hbcore's
        # TensorFlowKerasState (the same 20 MB in one variable there).
        for label, key, ours in [("ObjectState", "object_ms", "dense_ms"),
                                 ("TensorFlowState", "variable_ms",
                                  "tf_commit_ms")]:
            lines += [
                row % (np_, "Horovod commit, " + label, "%.2f ms" % r[key],
                       ""),
                row % (np_, "  share of its allreduce (1 per 10)",
                       "%.2f %%" % (r[key] / (10 * r["step_ms"]) * 100), ""),
                row % (np_, "  hbcore / Horovod commit ms",
                       _ratio(mine[ours], r[key]), "")]
        lines.append(row % (np_, "  step: Gloo allreduce of the gradient",
                            "%.1f ms" % r["step_ms"], ""))
        lines.append(row % (np_, "Horovod recovery: kill -> first step",
                            "%.2f s" % r["recovery_s"], ""))
        for label, key in [("  detection (last survivor)", "detect_s"),
                           ("    first survivor", "detect_first_s"),
                           ("  re-formation", "reform_s"),
                           ("  state sync", "sync_s")]:
            lines.append(row % (np_, label, "%.2f s" % r[key] if key in r
                                else "not seen", ""))
        lines.append(row % (np_, "  hbcore / Horovod recovery",
                            _ratio(mine["recovery_s"], r["recovery_s"]), ""))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rank", choices=["commit", "recovery"],
                        required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    if args.rank == "commit":
        rank_commit(args)
    else:
        rank_recovery(args)


if __name__ == "__main__":
    main()
