"""Launches rank scripts under ``hbrun -np N`` and collects what every rank
reported.

    run = run_ranks(script_path("collectives.py"), 3, timeout=60)
    run.assert_ok()                       # exit 0, every rank reported
    run.results[1]["topology"]            # rank 1's report() dict
    run.cases[1]["allreduce/float32/..."] # rank 1's per-case outcome

Every run gets a fresh temporary directory, passed to the ranks as
HB_TEST_OUT; rank scripts write there through tests/rank_scripts/common.py:
``report(obj)`` writes ``rank<N>.json`` (a dict), and ``Checker`` appends
one JSON line per case to ``rank<N>.cases.jsonl`` as soon as the case ends,
so a launch that hangs or crashes halfway still shows which cases ran.

The launch has a hard timeout: on expiry the whole process tree (hbrun,
mpiexec, wrappers, ranks) is killed with psutil and the RankRun says
``timed_out``; nothing outlives the test.

Several tests of one launch share it through the session's launch cache:
``cached_ranks(script, np, ...)`` (and ``cached_single``) run a launch
once per session for the same arguments; ``cached_run(key, make_run)``
caches any other launch (tests/support/tf_launch.py's, say).

A launch whose subject is not the process itself may ask for a warm world
(``warm=True``): its ranks are those of a long-lived numpy-only world of
the same rank count, environment and hbrun flags (tests/support/
warm_world.py), which run the script as a fresh ``hbrun`` job would, minus
the start of N processes, MPI_Init and the first connections. Launches
about init, shutdown, the environment read at init (unless each value has
its world), signals, exit codes, the launcher, faults, timing and memory
keep a fresh job. HB_TEST_WARM=0 in pytest's environment runs every
launch fresh (to compare, or to rule the warm worlds out).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import (Any, Callable, Dict, Hashable, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar)

import psutil

from support import hidden_imports
from support.under_test import import_paths

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS_DIR)
RANK_SCRIPTS = os.path.join(TESTS_DIR, "rank_scripts")
OUT_VAR = "HB_TEST_OUT"


def script_path(name: str) -> str:
    """Returns the absolute path of tests/rank_scripts/<name>."""
    return os.path.join(RANK_SCRIPTS, name)


def kill_tree(pid: int) -> None:
    """SIGKILLs a process and every descendant of it."""
    kill_trees([pid])


def kill_trees(pids: Sequence[int]) -> None:
    """SIGKILLs several processes and every descendant of each, then waits
    for all of them at once (psutil's wait for processes that are not our
    children polls, ~2 s per tree when waited for one after another).

    Args:
        pids: the roots; those already gone are skipped.
    """
    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs.extend(root.children(recursive=True) + [root])
        except psutil.Error:
            continue
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def base_env(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for a launch: ours, hbcore importable from the
    repository, HB_*/HOROVOD_* knobs of the caller's shell and MPI launcher
    variables (if pytest itself runs under one) removed, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HB_", "HOROVOD_", "PMI_", "PMIX_", "HYDRA_",
                                "MPIR_", "OMPI_"))
           or k == hidden_imports.VARIABLE}
    paths = import_paths() + [RANK_SCRIPTS]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    # numpy's BLAS threads would only compete with 4 ranks on 2 cores.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if extra:
        env.update(extra)
    return env


class RankRun:
    """The outcome of one launch.

    Attributes:
        np: ranks launched.
        returncode: hbrun's exit code (None when it timed out).
        timed_out: the hard timeout killed the job.
        duration: wall seconds from launch to exit (or kill).
        stdout, stderr: hbrun's output (rank lines prefixed ``[r]<stream>:``).
        results: rank -> the dict the rank passed to report().
        cases: rank -> {case name: outcome dict} from Checker.
        out_dir: the HB_TEST_OUT directory (kept until the RankRun is
            garbage; tests may put files there through env).
    """

    def __init__(self, np: int, returncode: Optional[int], timed_out: bool,
                 duration: float, stdout: str, stderr: str, out_dir: str,
                 command: Sequence[str]) -> None:
        self.np = np
        self.returncode = returncode
        self.timed_out = timed_out
        self.duration = duration
        self.stdout = stdout
        self.stderr = stderr
        self.out_dir = out_dir
        self.command = list(command)
        self.results: Dict[int, dict] = {}
        self.cases: Dict[int, Dict[str, dict]] = {}
        for rank in range(np):
            path = os.path.join(out_dir, "rank%d.json" % rank)
            if os.path.exists(path):
                with open(path) as f:
                    self.results[rank] = json.load(f)
            path = os.path.join(out_dir, "rank%d.cases.jsonl" % rank)
            if os.path.exists(path):
                cases: Dict[str, dict] = {}
                with open(path) as f:
                    for line in f:
                        line = line.strip()
                        if line:
                            record = json.loads(line)
                            cases[record["case"]] = record
                self.cases[rank] = cases

    # -- output -----------------------------------------------------------
    def rank_lines(self, rank: int, stream: str = "stderr") -> List[str]:
        """Lines rank ``rank`` printed on ``stream``, prefix removed."""
        prefix = "[%d]<%s>:" % (rank, stream)
        text = self.stdout if stream == "stdout" else self.stderr
        return [line[len(prefix):] for line in text.splitlines()
                if line.startswith(prefix)]

    def describe(self, tail: int = 6000) -> str:
        """A summary for assertion messages: code, timing, output tails."""
        return ("command: %s\nreturncode=%s timed_out=%s duration=%.1fs "
                "ranks reported=%s\n--- stdout (tail) ---\n%s\n"
                "--- stderr (tail) ---\n%s" % (
                    " ".join(self.command), self.returncode, self.timed_out,
                    self.duration, sorted(self.results),
                    self.stdout[-tail:], self.stderr[-tail:]))

    # -- checks ------------------------------------------------------------
    def assert_ok(self) -> None:
        """Asserts a clean run: no timeout, exit 0, every rank reported."""
        assert not self.timed_out, "job timed out\n" + self.describe()
        assert self.returncode == 0, "job failed\n" + self.describe()
        assert sorted(self.results) == list(range(self.np)), (
            "not every rank reported\n" + self.describe())

    def failed_cases(self, prefix: str = "") -> List[str]:
        """'rank r: case: error' for every failed case starting with
        ``prefix``, over all ranks."""
        out = []
        for rank in sorted(self.cases):
            for name, record in self.cases[rank].items():
                if name.startswith(prefix) and not record["ok"]:
                    out.append("rank %d: %s: %s" % (rank, name,
                                                     record["error"]))
        return out

    def assert_cases(self, names: Sequence[str]) -> None:
        """Asserts that every rank ran every case in ``names`` and each
        passed; the message lists every failure (and missing case)."""
        problems = []
        for rank in range(self.np):
            cases = self.cases.get(rank, {})
            for name in names:
                record = cases.get(name)
                if record is None:
                    problems.append("rank %d: %s: never finished" % (rank, name))
                elif not record["ok"]:
                    problems.append("rank %d: %s: %s" % (rank, name,
                                                         record["error"]))
        if problems:
            shown = problems[:40]
            if len(problems) > len(shown):
                shown.append("... and %d more" % (len(problems) - len(shown)))
            raise AssertionError("%d case failure(s):\n%s\n\n%s" % (
                len(problems), "\n".join(shown), self.describe(3000)))

    def __del__(self) -> None:
        shutil.rmtree(self.out_dir, ignore_errors=True)


def emulated_hosts(slots: Sequence[int],
                   rankmap: Optional[Sequence[int]] = None
                   ) -> Tuple[List[str], Dict[str, str]]:
    """hbrun flags and environment that run a job as if on several hosts.

    MPICH's fork launcher starts every rank on this machine while MPI sees
    ``len(slots)`` nodes named hA, hB, ... with ``slots[i]`` ranks each, so
    local and cross communicators split as on a cluster and traffic between
    the "hosts" takes MPI's network path.

    Args:
        slots: ranks per emulated host.
        rankmap: the host index of each rank (hydra's ``-rankmap``), for
            placements whose hosts are not consecutive in rank order:
            slots [2, 1] with rankmap [0, 1, 0] puts ranks 0 and 2 on hA.
            (A host list that names hA twice does not do it: hydra makes
            each entry a node of its own.) Default: hosts in rank order.

    Returns:
        (hbrun_args, env): env carries HB_TEST_HOSTS ("2,2") for rank
        scripts that check the topology.
    """
    hosts = ",".join("h%s:%d" % (chr(ord("A") + i), n)
                     for i, n in enumerate(slots))
    mpi_args = "-launcher fork"
    if rankmap is not None:
        mpi_args += " -rankmap " + ",".join(str(h) for h in rankmap)
    return (["-H", hosts, "--mpi-args=" + mpi_args],
            {"HB_TEST_HOSTS": ",".join(str(n) for n in slots)})


def warm_enabled() -> bool:
    """Whether ``warm=True`` launches use warm worlds (HB_TEST_WARM is not
    "0" in pytest's environment)."""
    return os.environ.get("HB_TEST_WARM", "1") != "0"


def run_ranks(script: str, np: int, timeout: float = 60,
              env: Optional[Mapping[str, str]] = None,
              args: Sequence[str] = (),
              hbrun_args: Sequence[str] = (),
              wrapper: Sequence[str] = (), warm: bool = False) -> RankRun:
    """Runs ``[wrapper] hbrun -np NP [hbrun_args] python SCRIPT ARGS`` and
    collects every rank's report.

    Args:
        script: path of the rank script (see script_path()).
        np: number of ranks.
        timeout: hard limit in seconds; the process tree is killed after it
            (a warm job: the job is failed and its world stopped).
        env: extra environment variables for every rank.
        args: arguments of the rank script.
        hbrun_args: extra hbrun flags (before the command).
        wrapper: a command that runs the rest (e.g. in another namespace).
        warm: run the script in a warm numpy world of the same ``np``,
            ``env`` and ``hbrun_args`` instead of a fresh job (see the
            module docstring: only for scripts whose subject is not the
            process); fresh anyway under HB_TEST_WARM=0.

    Returns:
        The RankRun (never raises for a failed or hung job; check it).

    Raises:
        ValueError: ``warm`` with a ``wrapper`` (a world has no wrapper).
    """
    if warm and wrapper:
        raise ValueError("a warm launch cannot run under a wrapper")
    if warm and warm_enabled():
        # Imported here: warm_world imports this module.
        from support.warm_world import run_warm

        return run_warm(script, np, timeout=timeout, env=env, args=args,
                        hbrun_args=hbrun_args, frontend="numpy")
    return run_hbrun(np, [sys.executable, script] + [str(a) for a in args],
                     timeout=timeout, env=env, hbrun_args=hbrun_args,
                     wrapper=wrapper)


def run_hbrun(np: int, command: Sequence[str], timeout: float = 60,
              env: Optional[Mapping[str, str]] = None,
              hbrun_args: Sequence[str] = (),
              wrapper: Sequence[str] = ()) -> RankRun:
    """Runs ``[wrapper] hbrun -np NP [hbrun_args] COMMAND``: run_ranks()
    for a rank command that is not a Python script of the tests (``true``,
    ``sleep 100``), in the same fresh directory, environment and hard
    timeout.

    Args:
        np: number of ranks.
        command: what every rank runs.
        timeout: hard limit in seconds; the process tree is killed after it.
        env: extra environment variables for every rank.
        hbrun_args: extra hbrun flags (before the command).
        wrapper: a command that runs the rest (e.g. in another namespace).

    Returns:
        The RankRun (never raises for a failed or hung job; check it).
    """
    full = (list(wrapper)
            + [sys.executable, "-m", "hbcore.launcher.cli", "-np", str(np)]
            + list(hbrun_args) + list(command))
    return _run(full, np, env, timeout)


# --- one launch per session --------------------------------------------------

T = TypeVar("T")
_cache: Dict[Hashable, Any] = {}


def cached_run(key: Hashable, make_run: Callable[[], T]) -> T:
    """The session's one result of ``make_run()`` for ``key``: the first
    call makes it, later calls (from any test file) return it, so several
    tests can assert on one launch.

    A key must say everything that makes the launch what it is (script,
    rank count, environment, arguments, flags); cached_ranks() and
    cached_single() build it from their arguments.

    Args:
        key: identifies the launch in the session.
        make_run: runs it (called at most once per key while it returns;
            a call that raises caches nothing).

    Returns:
        What make_run returned for this key.
    """
    if key not in _cache:
        _cache[key] = make_run()
    return _cache[key]


def _env_key(env: Optional[Mapping[str, str]]) -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted((env or {}).items()))


def cached_ranks(script: str, np: int, timeout: float = 60,
                 env: Optional[Mapping[str, str]] = None,
                 args: Sequence[str] = (),
                 hbrun_args: Sequence[str] = (),
                 wrapper: Sequence[str] = (), warm: bool = False) -> RankRun:
    """run_ranks(), once per session for the same arguments (see
    cached_run()).

    Args:
        script, np, timeout, env, args, hbrun_args, wrapper, warm: of
            run_ranks(); all of them are part of the key.

    Returns:
        The session's RankRun of that launch.

    Raises:
        ValueError: as run_ranks().
    """
    key = ("run_ranks", script, np, timeout, _env_key(env),
           tuple(str(a) for a in args), tuple(hbrun_args), tuple(wrapper),
           warm)
    return cached_run(key, lambda: run_ranks(
        script, np, timeout=timeout, env=env, args=args,
        hbrun_args=hbrun_args, wrapper=wrapper, warm=warm))


def cached_single(script: str, args: Sequence[str] = (),
                  env: Optional[Mapping[str, str]] = None,
                  timeout: float = 60) -> RankRun:
    """run_single(), once per session for the same arguments (see
    cached_run()).

    Args:
        script, args, env, timeout: of run_single(); all of them are part
            of the key.

    Returns:
        The session's RankRun of that run.
    """
    key = ("run_single", script, tuple(str(a) for a in args), _env_key(env),
           timeout)
    return cached_run(key, lambda: run_single(script, args=args, env=env,
                                              timeout=timeout))


def assert_bad_value_fails_init(variable: str, value: str,
                                np: int = 2) -> None:
    """Launches a short job of ``np`` ranks with ``variable=value`` and
    asserts that init failed on every rank with a ConfigError naming the
    variable and the value (and that nothing hung)."""
    run = run_ranks(script_path("short_job.py"), np, timeout=60,
                    env={variable: value})
    assert run.returncode != 0 and not run.timed_out, run.describe()
    text = run.stdout + run.stderr
    assert "invalid value for %s: '%s'" % (variable, value) in text, text
    assert text.count("ConfigError") >= np, text


def assert_memory_steady(run: RankRun, bound: int) -> None:
    """Asserts that every rank of a steady-memory run grew by at most
    ``bound`` bytes in the smaller of the last two thirds of its steps.

    The rank scripts (rank_scripts/steady_memory.py, tf/rank_scripts/
    steady_memory_tf.py) report ``marks`` (the steps after a third, two
    thirds and all of them) and ``anon_rss`` (RssAnon there). A leak grows
    in both thirds; a pool or allocator arena that reaches its size grows
    once, in one of them.
    """
    run.assert_ok()
    for rank in range(run.np):
        marks = run.results[rank]["marks"]
        third, two_thirds, end = run.results[rank]["anon_rss"]
        growth = min(two_thirds - third, end - two_thirds)
        assert growth <= bound, (
            "rank %d grew by %.2f MiB from step %d to %d and by %.2f MiB "
            "from step %d to %d" % (
                rank, (two_thirds - third) / 2**20, marks[0], marks[1],
                (end - two_thirds) / 2**20, marks[1], marks[2]),
            run.describe())


def _run(command: Sequence[str], np: int, env: Optional[Mapping[str, str]],
         timeout: float) -> RankRun:
    out_dir = tempfile.mkdtemp(prefix="hbtest_")
    full_env = base_env(env)
    full_env[OUT_VAR] = out_dir
    start = time.monotonic()
    proc = subprocess.Popen(list(command), cwd=out_dir, env=full_env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
    except BaseException:
        # pytest-timeout's alarm (its timeout may come first) or an
        # interrupt: the job has a session of its own, so nothing else
        # would stop it, and it would go on loading the machine under the
        # next tests.
        kill_tree(proc.pid)
        proc.communicate()
        raise
    duration = time.monotonic() - start
    return RankRun(np, None if timed_out else proc.returncode, timed_out,
                   duration, stdout, stderr, out_dir, command)


def run_single(script: str, args: Sequence[str] = (),
               env: Optional[Mapping[str, str]] = None,
               timeout: float = 60) -> RankRun:
    """Runs ``python SCRIPT ARGS`` as one process without a launcher (a
    singleton MPI job), with HB_TEST_OUT set like run_ranks; returns a
    RankRun with np=1."""
    return _run([sys.executable, script] + [str(a) for a in args], 1, env,
                timeout)


def run_python(code: str, env: Optional[Mapping[str, str]] = None,
               timeout: float = 60) -> RankRun:
    """Runs ``python -c CODE`` as a singleton process (see run_single)."""
    return _run([sys.executable, "-c", code], 1, env, timeout)


def python_result(code: str, env: Optional[Mapping[str, str]] = None,
                  timeout: float = 180) -> Dict[str, Any]:
    """Runs ``python -c CODE`` (run_python), which prints one line
    ``RESULT <json>``; asserts that it exited 0 and printed it, and returns
    the decoded JSON."""
    run = run_python(code, env=env, timeout=timeout)
    assert run.returncode == 0, run.describe()
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, run.describe()
    return json.loads(lines[0][len("RESULT "):])
