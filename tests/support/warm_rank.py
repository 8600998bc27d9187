"""One rank of a warm world (tests/support/warm_world.py): a process that
did its imports once and then runs rank scripts sent to it, one after
another, each as ``python SCRIPT ARGS`` would.

    hbrun -np N python warm_rank.py CONTROL_DIR OWNER_PID [FRONTEND]

FRONTEND says what the world imported up front and resets after each job:
``tf`` (the default; TensorFlow, Keras and hbcore_tf, for the rank scripts
of tests/tf) or ``numpy`` (numpy and hbcore only, for those of
tests/rank_scripts; such a world never imports TensorFlow).

The protocol, over files in CONTROL_DIR (every rank runs the same steps):
  1. Before the first job, write ``ready.rank<r>`` (imports done).
  2. Wait for ``job<k>.json`` (k = 0, 1, ...; written atomically by the
     test process): {script, args, env, out_dir}.
  3. Run it: stdout and stderr (the file descriptors, so the core's and
     TensorFlow's C++ output too) go to ``job<k>.rank<r>.out/.err``; the
     environment is the world's plus the job's plus HB_TEST_OUT; the
     working directory is out_dir; sys.argv is [script] + args; the
     script runs as ``__main__`` with the test-helper modules imported
     afresh (their module state is the job's own).
  4. Make the next job start as a fresh process would: hbcore shut down
     (scripts that did not), so the next job's hbcore.init() is a fresh
     init; environment, cwd, argv and sys.path restored; in a ``tf``
     world Keras' session and TF's default graph cleared; in a ``numpy``
     world hbcore's per-process naming state (the ``noname`` counters)
     cleared, and warnings filters and registries and numpy's error
     settings restored.
  5. Write ``done<k>.rank<r>.json``: {code, retire}. ``code`` is what the
     process would have exited with (0, SystemExit's code, 1 for an
     uncaught exception, whose traceback goes to the job's stderr).
     ``retire`` is true when the job left state that a fresh process would
     not have (``tf``: eager execution turned off, as tf.compat.v1 graph
     mode cannot be undone; ``numpy``: TensorFlow imported, or a Python
     thread still running), or the world has run its share of jobs, or
     this rank has grown past MAX_RSS_BYTES; then the ranks exit after the
     done file, and the test side stops the world (a rank that did not
     retire is killed) and starts a new one next time.
  6. Every second without a job, check that the test process (OWNER_PID)
     still lives; exit when it does not, so no world outlives its pytest.

A job whose ranks disagree (a failure on some ranks) leaves the others in
a collective: the test side kills the world then; nothing here has to
recover from it.
"""
import gc
import json
import os
import runpy
import sys
import threading
import time
import traceback
import types
import warnings

import numpy as np

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A world runs at most this many jobs (per frontend), so memory that TF or
# Keras keep per model (caches no clear_session reaches) stays bounded; a
# numpy world keeps little between jobs and may run more.
MAX_JOBS = {"tf": 25, "numpy": 100}
# A rank that has grown past this retires its world after the job: up to
# six worlds of 2-4 ranks share the 24 GiB of the CI machine.
MAX_RSS_BYTES = 2 << 30
IDLE_POLL_S = 0.05


def _shutdown_hbcore(hbcore: types.ModuleType) -> None:
    """Shuts hbcore down (when the script did not), so the next job's
    hbcore.init() is a fresh init."""
    try:
        hbcore.shutdown()
    except Exception:  # noqa: BLE001 - a stopped runtime is fine too
        traceback.print_exc()


class NumpyFrontend:
    """What a ``numpy`` world imports once (numpy, hbcore) and resets after
    every job (step 4): hbcore's runtime and per-process state, and the
    process-wide settings a script may change (warnings, numpy's error
    handling)."""

    name = "numpy"

    def __init__(self) -> None:
        import hbcore
        import hbcore.ops

        self.hbcore = hbcore
        self._ops = hbcore.ops
        # Restored after every job. The modules the numpy scripts import
        # lazily (mpi4py, ml_dtypes, cloudpickle) add no filters at import,
        # so a filter a job's import added is not lost to later jobs.
        self._warning_filters = list(warnings.filters)
        self._numpy_errors = np.geterr()
        self._threads = threading.active_count()

    def reset(self) -> None:
        """Shuts hbcore down and restores what the script may have
        changed, as a fresh process would have it."""
        _shutdown_hbcore(self.hbcore)
        # Unnamed collectives are named from per-process counters
        # (hbcore.ops.auto_name); a fresh process starts them at 0, and a
        # job whose ranks made different numbers of unnamed calls must not
        # leave the next job's names out of step across ranks.
        with self._ops._counters_lock:
            self._ops._counters.clear()
        # resetwarnings() bumps the filters' version, which also empties
        # the "once"/"default" registries: a warning shown in an earlier
        # job is shown again, as in a fresh process.
        warnings.resetwarnings()
        warnings.filters[:] = self._warning_filters
        np.seterr(**self._numpy_errors)

    def leftovers(self) -> str:
        """What the job left that a fresh process would not have.

        Returns:
            "" for nothing, else the reason to retire the world.
        """
        if "tensorflow" in sys.modules:
            return "TensorFlow imported"
        if threading.active_count() > self._threads:
            return "a Python thread still running"
        return ""


class TfFrontend:
    """What a ``tf`` world imports once (TensorFlow, Keras, hbcore_tf's op
    library) and resets after every job (step 4): hbcore's runtime, Keras'
    session and TF's default graph."""

    name = "tf"

    def __init__(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        # The thread pools the world's scripts ask for (warm_world.py reads
        # them from the script and keeps a world per answer), set before
        # anything creates the eager context: they cannot change
        # afterwards. Hence TensorFlow comes before hbcore.
        threads = os.environ.get("HB_TEST_TF_THREADS", "")
        if threads:
            intra, inter = (int(n) for n in threads.split(","))
            tf.config.threading.set_intra_op_parallelism_threads(intra)
            tf.config.threading.set_inter_op_parallelism_threads(inter)
        import hbcore
        import hbcore_tf  # noqa: F401  (compiles / loads the op library once)
        from hbcore_tf._base import compat

        self.hbcore = hbcore
        self.tf = tf
        self.keras = compat.keras_module()

    def reset(self) -> None:
        """Shuts hbcore down, clears Keras' session and TF's graph."""
        _shutdown_hbcore(self.hbcore)
        self.keras.backend.clear_session()
        if self.tf.executing_eagerly():
            self.tf.compat.v1.reset_default_graph()

    def leftovers(self) -> str:
        """What the job left that a fresh process would not have (TF and
        Keras run threads of their own; only graph mode counts).

        Returns:
            "" for nothing, else the reason to retire the world.
        """
        if not self.tf.executing_eagerly():
            return "eager execution turned off"
        return ""


FRONTENDS = {"numpy": NumpyFrontend, "tf": TfFrontend}


def _rank() -> int:
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _await_job(control: str, k: int, owner: int) -> dict:
    path = os.path.join(control, "job%d.json" % k)
    last_check = time.monotonic()
    poll = 0.002
    while not os.path.exists(path):
        time.sleep(poll)
        poll = min(poll * 2, IDLE_POLL_S)
        if time.monotonic() - last_check > 1.0:
            last_check = time.monotonic()
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                os._exit(0)
    with open(path) as f:
        return json.load(f)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _purge_test_modules() -> None:
    """Forgets every module loaded from tests/ (rank scripts and their
    helpers), so the next job imports them afresh."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(TESTS_DIR + os.sep):
            del sys.modules[name]


class _Redirected:
    """fd 1 and 2 (and sys.stdout/err) into two files for one job."""

    def __init__(self, out_path: str, err_path: str) -> None:
        self._paths = (out_path, err_path)
        self._saved = []

    def __enter__(self) -> "_Redirected":
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, path in zip((1, 2), self._paths):
            self._saved.append(os.dup(fd))
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                             0o644)
            os.dup2(target, fd)
            os.close(target)
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)


def _run_script(job: dict) -> int:
    script = job["script"]
    sys.argv = [script] + list(job["args"])
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter would
        traceback.print_exc()
        return 1
    return 0


def main() -> None:
    control, owner = sys.argv[1], int(sys.argv[2])
    frontend = FRONTENDS[sys.argv[3] if len(sys.argv) > 3 else "tf"]()
    max_jobs = MAX_JOBS[frontend.name]
    rank = _rank()
    base_env = dict(os.environ)
    base_cwd = os.getcwd()
    base_path = list(sys.path)
    _write_atomic(os.path.join(control, "ready.rank%d" % rank), "")
    for k in range(max_jobs):
        job = _await_job(control, k, owner)
        os.environ.clear()
        os.environ.update(base_env)
        os.environ.update(job["env"])
        os.environ["HB_TEST_OUT"] = job["out_dir"]
        os.chdir(job["out_dir"])
        _purge_test_modules()
        prefix = os.path.join(control, "job%d.rank%d" % (k, rank))
        with _Redirected(prefix + ".out", prefix + ".err"):
            code = _run_script(job)
            frontend.reset()
            gc.collect()
            leftovers = frontend.leftovers()
        if leftovers:
            # To hbrun's log (the world's), not the job's output.
            print("[warm world] rank %d retires after job %d: %s"
                  % (rank, k, leftovers), file=sys.stderr)
        retire = (bool(leftovers) or k == max_jobs - 1
                  or _rss_bytes() > MAX_RSS_BYTES)
        os.environ.clear()
        os.environ.update(base_env)
        os.chdir(base_cwd)
        sys.path[:] = base_path
        sys.argv = [sys.argv[0]]
        _write_atomic(os.path.join(control, "done%d.rank%d.json" % (k, rank)),
                      json.dumps({"code": code, "retire": retire}))
        if code != 0 or retire:
            break


if __name__ == "__main__":
    main()
