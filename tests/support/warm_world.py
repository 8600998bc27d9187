"""Warm worlds: ``hbrun -np N`` jobs that stay up across tests and run the
rank scripts sent to them, so a test pays for its own work, not for N
processes importing TensorFlow (or numpy and hbcore), initialising MPI
and making their first connections again.

    run = run_warm(script, np=3, env={...}, args=(), timeout=180)
    run.assert_ok()            # the same RankRun a cold run_ranks() returns
    run = run_warm(script, np=3, frontend="numpy")   # a world without TF

A world is kept per (frontend, rank count, environment, hbrun flags, TF
thread pools): the environment is fixed when TensorFlow is imported
(TF_USE_LEGACY_KERAS, PYTHONPATH), HybridBackend's options read it at
their first use and hbcore's knobs (HB_*) at every init, and TF's thread
pools cannot change once TF ran an op, so a job runs only in a world
started with exactly its own. The frontend says what the ranks import up
front: ``tf`` (TensorFlow, Keras, hbcore_tf: tests/tf's rank scripts) or
``numpy`` (numpy and hbcore only: tests/rank_scripts', launched through
harness.run_ranks(..., warm=True)).
The ranks (tests/support/warm_rank.py) run each job as a fresh process
would run the script; its docstring states the protocol.

What a warm run keeps from a cold one:
  - isolation: each job has its own HB_TEST_OUT, environment, working
    directory, stdout/stderr, hbcore runtime (init/shutdown), Keras
    session and TF graph (tf) or hbcore's naming counters, warnings state
    and numpy error settings (numpy), and imports the test helpers afresh;
  - failure: a job that fails on any rank, hangs past its timeout, or
    kills a rank ends the world (it is started again for the next job) and
    fails only itself, with every rank's output in its RankRun;
  - retirement: a job that leaves what a fresh process would not have
    (tf.compat.v1 graph mode; TensorFlow or a running thread in a numpy
    world) ends the world after it.
Jobs that need a process of their own (what happens at import or init,
fault injection, launcher flags) do not come here: they use
harness.run_ranks.

At most MAX_WORLDS[frontend] worlds of a frontend are alive at once (the
least recently used one is stopped), and every world is stopped when the
test session ends.
"""
import atexit
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

SUPPORT_DIR = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(SUPPORT_DIR)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.harness import (RankRun, base_env, kill_tree,  # noqa: E402
                             kill_trees)

RANK_SERVER = os.path.join(SUPPORT_DIR, "warm_rank.py")
# tf: 2 flavours x 2 rank counts (the worlds one rank_script_tests file
# uses) and two more, so a launch with an environment of its own between
# two such files does not evict a world the next file needs.
# numpy: the plain 2, 3 and 4 rank worlds, and one of an environment or
# host layout of its own (a numpy rank takes ~75 MB).
# Under pytest-xdist every worker keeps worlds of its own, so each keeps
# only the four TF worlds of a rank_script_tests file (a TF rank takes
# ~650 MB: 2 workers x 10 ranks stay well inside 24 GB).
MAX_WORLDS = ({"tf": 4, "numpy": 4} if "PYTEST_XDIST_WORKER" in os.environ
              else {"tf": 6, "numpy": 4})
# Seconds a world may take to start (every rank imports TF, hbcore_tf; or
# numpy and hbcore).
START_TIMEOUT_S = {"tf": 180, "numpy": 60}
# After one rank failed, seconds the others get to finish the job too
# before the world is stopped (they may be waiting in a collective).
STRAGGLER_S = 5.0
# (frontend, np, environment, hbrun flags)
WorldKey = Tuple[str, int, Tuple[Tuple[str, str], ...], Tuple[str, ...]]


# A rank script asks TF for its thread pools before its first op (they
# cannot change later in the process): explicitly, or through the
# training scripts' helper module, which asks for one thread each.
_THREAD_CALL = re.compile(
    r"set_(intra|inter)_op_parallelism_threads\((\d+)\)")
_THREADS_BY_IMPORT = {"train_common": "1,1"}


def tf_threads(script: str) -> str:
    """"INTRA,INTER" as ``script`` sets TF's thread pools, or "" when it
    leaves TF's defaults; the worlds' HB_TEST_TF_THREADS."""
    with open(script) as f:
        source = f.read()
    calls = dict(_THREAD_CALL.findall(source))
    if calls:
        return "%s,%s" % (calls.get("intra", "0"), calls.get("inter", "0"))
    for module, threads in _THREADS_BY_IMPORT.items():
        if re.search(r"^\s*(from|import) %s\b" % module, source, re.M):
            return threads
    return ""


class WorldDied(Exception):
    """The world's hbrun exited or did not start."""


class WarmWorld:
    """One hbrun job of N warm ranks; runs one job at a time."""

    def __init__(self, np: int, env: Mapping[str, str],
                 hbrun_args: Sequence[str], frontend: str = "tf") -> None:
        self.np = np
        self.frontend = frontend
        self.control = tempfile.mkdtemp(prefix="hbwarm_")
        self.command = ([sys.executable, "-m", "hbcore.launcher.cli",
                         "-np", str(np)] + list(hbrun_args)
                        + [sys.executable, RANK_SERVER, self.control,
                           str(os.getpid()), frontend])
        full_env = base_env(env)
        self._log = open(os.path.join(self.control, "hbrun.log"), "w+")
        self.proc = subprocess.Popen(
            self.command, cwd=self.control, env=full_env,
            stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True)
        self.jobs = 0
        self.retired = False

    # -- lifetime ----------------------------------------------------------
    def alive(self) -> bool:
        return not self.retired and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait()
        self._log.close()
        shutil.rmtree(self.control, ignore_errors=True)

    def hbrun_output(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def _wait_files(self, names: Sequence[str], deadline: float) -> bool:
        """Waits until every file exists; False at the deadline. Raises
        WorldDied when hbrun exits first."""
        poll = 0.002
        while True:
            if all(os.path.exists(os.path.join(self.control, n))
                   for n in names):
                return True
            if self.proc.poll() is not None:
                # The files may have landed just before the exit.
                if all(os.path.exists(os.path.join(self.control, n))
                       for n in names):
                    return True
                raise WorldDied("hbrun exited with %s" % self.proc.returncode)
            if time.monotonic() > deadline:
                return False
            time.sleep(poll)
            poll = min(poll * 2, 0.02)

    def wait_ready(self) -> None:
        names = ["ready.rank%d" % r for r in range(self.np)]
        limit = START_TIMEOUT_S[self.frontend]
        if not self._wait_files(names, time.monotonic() + limit):
            raise WorldDied("the world did not start in %d s" % limit)

    # -- one job -----------------------------------------------------------
    def run(self, script: str, args: Sequence[str], out_dir: str,
            timeout: float) -> RankRun:
        """Runs one job and returns its RankRun; the world is stopped
        (and ``alive()`` false) after a failed, hung or retiring job."""
        k = self.jobs
        self.jobs += 1
        job = {"script": script, "args": [str(a) for a in args],
               "env": {}, "out_dir": out_dir}
        path = os.path.join(self.control, "job%d.json" % k)
        with open(path + ".tmp", "w") as f:
            json.dump(job, f)
        start = time.monotonic()
        os.replace(path + ".tmp", path)
        done = ["done%d.rank%d.json" % (k, r) for r in range(self.np)]
        timed_out = died = False
        try:
            if not self._wait_files(done, start + timeout):
                timed_out = True
        except WorldDied:
            died = True
        codes = self._codes(k)
        if not timed_out and not died and any(c != 0 for c in codes.values()):
            # Some rank failed: the others either finish at once or wait
            # in a collective for it; give them a moment, then stop.
            try:
                self._wait_files(done, time.monotonic() + STRAGGLER_S)
            except WorldDied:
                died = True
            codes = self._codes(k)
        duration = time.monotonic() - start
        retire = any(self._done(k, r).get("retire") for r in codes)
        failed = (timed_out or died or len(codes) < self.np
                  or any(c != 0 for c in codes.values()))
        if failed or retire:
            self.retired = True
            self.stop_processes()
        stdout, stderr = self._outputs(k)
        returncode: Optional[int]
        if timed_out:
            returncode = None
        elif died or len(codes) < self.np:
            returncode = self.proc.returncode or 1
            stderr += ("\n[warm world] hbrun exited with %s; its output:\n%s"
                       % (self.proc.returncode, self.hbrun_output()[-6000:]))
        else:
            returncode = next((c for c in codes.values() if c != 0), 0)
        return RankRun(self.np, returncode, timed_out, duration, stdout,
                       stderr, out_dir,
                       ["warm:"] + self.command[:5] + [script]
                       + [str(a) for a in args])

    def stop_processes(self) -> None:
        if self.proc.poll() is None:
            if self.retired and self._all_retiring():
                # The ranks exit by themselves after a retiring job.
                try:
                    self.proc.wait(timeout=30)
                    return
                except subprocess.TimeoutExpired:
                    pass
            kill_tree(self.proc.pid)
            self.proc.wait()

    def _all_retiring(self) -> bool:
        k = self.jobs - 1
        records = [self._done(k, r) for r in range(self.np)]
        return all(r.get("retire") and r.get("code") == 0 for r in records)

    def _done(self, k: int, rank: int) -> dict:
        path = os.path.join(self.control, "done%d.rank%d.json" % (k, rank))
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _codes(self, k: int) -> Dict[int, int]:
        codes = {}
        for rank in range(self.np):
            record = self._done(k, rank)
            if record:
                codes[rank] = int(record["code"])
        return codes

    def _outputs(self, k: int) -> Tuple[str, str]:
        """The job's output as hbrun prints it: '[r]<stream>:line'."""
        streams: Dict[str, List[str]] = {"stdout": [], "stderr": []}
        for rank in range(self.np):
            for stream, ext in (("stdout", "out"), ("stderr", "err")):
                path = os.path.join(self.control,
                                    "job%d.rank%d.%s" % (k, rank, ext))
                try:
                    with open(path, errors="replace") as f:
                        text = f.read()
                except OSError:
                    continue
                streams[stream].extend("[%d]<%s>:%s" % (rank, stream, line)
                                       for line in text.splitlines())
        return ("\n".join(streams["stdout"]) + "\n",
                "\n".join(streams["stderr"]) + "\n")


_worlds: "collections.OrderedDict[WorldKey, WarmWorld]" = \
    collections.OrderedDict()


def _world(frontend: str, np: int, env: Mapping[str, str],
           hbrun_args: Sequence[str]) -> WarmWorld:
    key: WorldKey = (frontend, np, tuple(sorted(env.items())),
                     tuple(hbrun_args))
    world = _worlds.get(key)
    if world is not None and world.alive():
        _worlds.move_to_end(key)
        return world
    if world is not None:
        world.stop()
        del _worlds[key]
    same_frontend = [k for k in _worlds if k[0] == frontend]
    # _worlds is in least recently used order, and so is same_frontend.
    excess = max(0, len(same_frontend) + 1 - MAX_WORLDS[frontend])
    for old in same_frontend[:excess]:
        _worlds.pop(old).stop()
    world = WarmWorld(np, env, hbrun_args, frontend)
    _worlds[key] = world
    return world


def run_warm(script: str, np: int, timeout: float = 180,
             env: Optional[Mapping[str, str]] = None,
             args: Sequence[str] = (),
             hbrun_args: Sequence[str] = (),
             frontend: str = "tf") -> RankRun:
    """Runs ``python SCRIPT ARGS`` on every rank of a warm world of ``np``
    ranks started with ``env`` and ``hbrun_args`` (started now if none is
    up), as ``harness.run_ranks`` would run it in a fresh job.

    Args:
        script: path of the rank script.
        np: number of ranks.
        timeout: hard limit of the job in seconds (the world's start-up,
            when it has to start, is not counted; it has its own limit).
        env: the environment of the world (see the module docstring).
        args: arguments of the script.
        hbrun_args: hbrun flags of the world.
        frontend: what the world's ranks import up front: "tf"
            (TensorFlow, Keras, hbcore_tf) or "numpy" (numpy and hbcore
            only; such a world never has TensorFlow).

    Returns:
        The RankRun (never raises for a failed or hung job; check it).

    Raises:
        ValueError: an unknown ``frontend``.
    """
    if frontend not in MAX_WORLDS:
        raise ValueError("unknown frontend %r (known: %s)"
                         % (frontend, ", ".join(sorted(MAX_WORLDS))))
    env = dict(env or {})
    if frontend == "tf":
        env["HB_TEST_TF_THREADS"] = tf_threads(script)
    world = _world(frontend, np, env, hbrun_args)
    out_dir = tempfile.mkdtemp(prefix="hbtest_")
    if world.jobs == 0:
        try:
            world.wait_ready()
        except WorldDied as exc:
            world.retired = True
            world.stop_processes()
            return RankRun(np, world.proc.returncode, False, 0.0, "",
                           "[warm world] %s; hbrun's output:\n%s" % (
                               exc, world.hbrun_output()[-6000:]),
                           out_dir, world.command)
    try:
        return world.run(script, args, out_dir, timeout)
    except BaseException:
        # pytest-timeout's alarm or an interrupt in the middle of a job:
        # the world's state is unknown, so it goes.
        world.retired = True
        world.stop_processes()
        raise


@atexit.register
def stop_all() -> None:
    """Stops every world (the end of the test session): all killed at
    once, then each one's files removed."""
    worlds = list(_worlds.values())
    _worlds.clear()
    kill_trees([w.proc.pid for w in worlds if w.proc.poll() is None])
    for world in worlds:
        world.stop()


__all__ = ["run_warm", "stop_all", "tf_threads"]
