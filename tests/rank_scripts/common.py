"""Helpers imported by the rank scripts (run under hbrun by
tests/support/harness.py).

- report(obj): writes this rank's result dict to $HB_TEST_OUT/rank<N>.json.
- Checker: runs named cases, records each outcome at once (one JSON line in
  $HB_TEST_OUT/rank<N>.cases.jsonl) and never lets one case's failure stop
  the others.
- rank_data(): the rank-seeded data every rank can recompute for any other
  rank, so expected values come from numpy, never from hbcore.
- assert_close(): dtype-aware comparison.
- signal_peers() / await_peers(): marker-file handshakes that order ranks
  without sleeps and without hbcore.

Nothing here imports hbcore at module level, so the pytest side can import
the case tables of the rank scripts without starting MPI.
"""
import json
import os
import time
import traceback
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

OUT_DIR = os.environ.get("HB_TEST_OUT", "")

DTYPE_NAMES = ["uint8", "int8", "uint16", "int16", "int32", "int64",
               "float16", "bfloat16", "float32", "float64", "bool"]


def dtype_of(name: str) -> np.dtype:
    """numpy dtype for one of DTYPE_NAMES."""
    if name == "bfloat16":
        # Imported on first use: ml_dtypes takes about 0.5 s to import on a
        # 2-core machine, paid by every rank of every launch otherwise.
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_float(name: str) -> bool:
    return name in ("float16", "bfloat16", "float32", "float64")


def is_int(name: str) -> bool:
    return name in ("uint8", "int8", "uint16", "int16", "int32", "int64")


def env_rank() -> int:
    """This process's rank from the MPI launcher's environment (usable
    before hbcore.init and after shutdown)."""
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def env_size() -> int:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 1


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def report(obj: Dict[str, Any], rank: Optional[int] = None) -> None:
    """Writes this rank's result dict (JSON-able) for the test to read."""
    rank = env_rank() if rank is None else rank
    if not OUT_DIR:
        print("report:", json.dumps(obj, default=str))
        return
    _write_atomic(os.path.join(OUT_DIR, "rank%d.json" % rank),
                  json.dumps(obj, default=str))


def exc_info(exc: BaseException) -> Dict[str, Any]:
    """A JSON-able description of an exception (type, bases, message)."""
    return {"type": type(exc).__name__,
            "mro": [c.__name__ for c in type(exc).__mro__],
            "message": str(exc)}


class CaseFailure(AssertionError):
    pass


class Checker:
    """Runs cases and records each outcome as soon as it is known."""

    def __init__(self, rank: Optional[int] = None) -> None:
        self.rank = env_rank() if rank is None else rank
        self.results: Dict[str, Dict[str, Any]] = {}
        self._path = (os.path.join(OUT_DIR, "rank%d.cases.jsonl" % self.rank)
                      if OUT_DIR else None)

    def record(self, name: str, ok: bool, error: str = "",
               seconds: float = 0.0) -> None:
        entry = {"case": name, "ok": ok, "error": error,
                 "seconds": round(seconds, 4)}
        self.results[name] = entry
        if self._path:
            with open(self._path, "a") as f:
                f.write(json.dumps(entry) + "\n")
        elif not ok:
            print("FAIL", name, error)

    def run(self, name: str, fn: Callable[[], Any]) -> bool:
        start = time.monotonic()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every failure is a result
            tb = traceback.format_exc(limit=6)
            self.record(name, False, "%s: %s\n%s" % (type(exc).__name__, exc,
                                                     tb),
                        time.monotonic() - start)
            return False
        self.record(name, True, "", time.monotonic() - start)
        return True

    @property
    def all_ok(self) -> bool:
        return all(r["ok"] for r in self.results.values())


# --------------------------------------------------------------------- data

def rank_rng(seed: int, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, rank])


def rank_data(seed: int, rank: int, shape: Sequence[int], dtype_name: str,
              kind: str = "any") -> np.ndarray:
    """Data of ``rank`` for a case seeded by ``seed``; any rank can compute
    any other rank's data.

    kind: 'any' (small values, sums of 4 ranks fit every dtype),
          'small' (ints in [-5, 5] or [0, 9]: 4 ranks x scale 6 still fit
          int8/uint8),
          'positive' (for Product: floats in [0.5, 1.5], ints in [1, 3]).
    """
    rng = rank_rng(seed, rank)
    shape = tuple(int(d) for d in shape)
    dt = dtype_of(dtype_name)
    if dtype_name == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if is_float(dtype_name):
        if kind == "positive":
            values = rng.uniform(0.5, 1.5, size=shape)
        else:
            values = rng.uniform(-4.0, 4.0, size=shape)
        return np.asarray(values).astype(dt)
    # integers
    if kind == "positive":
        values = rng.integers(1, 4, size=shape)
    elif kind == "small":
        values = rng.integers(0 if dtype_name.startswith("u") else -5, 10 if
                              dtype_name.startswith("u") else 6, size=shape)
    elif dtype_name.startswith("u"):
        values = rng.integers(0, 30, size=shape)
    else:
        values = rng.integers(-30, 30, size=shape)
    return np.asarray(values).astype(dt)


def all_rank_data(seed: int, size: int, shape: Sequence[int],
                  dtype_name: str, kind: str = "any"):
    return [rank_data(seed, r, shape, dtype_name, kind) for r in range(size)]


def reducescatter_rows(n: int, parts: int, index: int) -> Tuple[int, int]:
    """(start, count) of the ``index``-th member's block when a
    reducescatter splits ``n`` rows over ``parts`` members: the first
    n % parts members get one row more."""
    base, extra = divmod(n, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


def reduce_expected(inputs: Sequence[np.ndarray], dtype_name: str, op: str,
                    prescale: float = 1.0, postscale: float = 1.0
                    ) -> np.ndarray:
    """numpy's answer for an allreduce of ``inputs`` with op name
    ('Average', 'Sum', 'Min', 'Max', 'Product'), computed in float64 /
    int64 and cast to the dtype. Integer Average truncates toward zero."""
    size = len(inputs)
    dt = dtype_of(dtype_name)
    if dtype_name == "bool":
        stack = np.stack([np.asarray(x, np.bool_) for x in inputs])
        if op in ("Sum", "Max"):
            return np.any(stack, axis=0)
        if op in ("Min", "Product"):
            return np.all(stack, axis=0)
        raise ValueError(op)
    if is_float(dtype_name):
        stack = np.stack([np.asarray(x).astype(np.float64) * prescale
                          for x in inputs])
    else:
        stack = np.stack([np.asarray(x).astype(np.int64) * int(prescale)
                          for x in inputs])
    if op == "Sum":
        out = stack.sum(axis=0)
    elif op == "Average":
        out = stack.sum(axis=0)
    elif op == "Min":
        out = stack.min(axis=0)
    elif op == "Max":
        out = stack.max(axis=0)
    elif op == "Product":
        out = stack.prod(axis=0)
    else:
        raise ValueError(op)
    if is_float(dtype_name):
        if op == "Average":
            out = out / size
        return (out * postscale).astype(dt)
    # integers: scale exactly, then truncate toward zero
    if op == "Average":
        num = out * int(postscale)
        out = np.sign(num) * (np.abs(num) // size)
    else:
        out = out * int(postscale)
    return out.astype(dt)


TOLERANCE = {"float16": (1e-2, 2e-2), "bfloat16": (2e-2, 1e-1),
             "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}


def assert_close(actual: Any, expected: np.ndarray, dtype_name: str,
                 what: str = "") -> None:
    """Asserts dtype, shape and values (exact for ints/bool, rtol/atol for
    floats; float16/bfloat16 loosely since the core rounds every step)."""
    if not isinstance(actual, np.ndarray):
        raise CaseFailure("%s: expected an ndarray, got %s" % (
            what, type(actual).__name__))
    exp_dt = dtype_of(dtype_name)
    if actual.dtype != exp_dt:
        raise CaseFailure("%s: dtype %s, expected %s" % (what, actual.dtype,
                                                         exp_dt))
    if actual.shape != expected.shape:
        raise CaseFailure("%s: shape %s, expected %s" % (what, actual.shape,
                                                         expected.shape))
    if is_float(dtype_name):
        rtol, atol = TOLERANCE[dtype_name]
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        if not np.allclose(a, e, rtol=rtol, atol=atol):
            bad = ~np.isclose(a, e, rtol=rtol, atol=atol)
            raise CaseFailure("%s: %d of %d values differ; first got %s "
                              "expected %s" % (what, bad.sum(), bad.size,
                                               a[bad][:5], e[bad][:5]))
    else:
        if not np.array_equal(actual, expected):
            bad = actual != expected
            raise CaseFailure("%s: %d of %d values differ; first got %s "
                              "expected %s" % (what, np.sum(bad), bad.size,
                                               actual[bad][:5],
                                               expected[bad][:5]))


def expect_raises(fn: Callable[[], Any], exc_type: type,
                  *fragments: str) -> BaseException:
    """Calls fn, asserts it raises exc_type whose message contains every
    fragment (case-insensitive); returns the exception."""
    try:
        fn()
    except exc_type as exc:
        message = str(exc).lower()
        missing = [f for f in fragments if f.lower() not in message]
        if missing:
            raise CaseFailure("%s raised, but message %r lacks %r" % (
                type(exc).__name__, str(exc), missing))
        return exc
    except Exception as exc:  # noqa: BLE001
        raise CaseFailure("expected %s, got %s: %s" % (
            exc_type.__name__, type(exc).__name__, exc))
    raise CaseFailure("expected %s, nothing raised" % exc_type.__name__)


# ------------------------------------------------------------------- memory

def anon_rss_bytes() -> int:
    """This process's anonymous resident memory (RssAnon: what a leak
    grows; shared-memory segments are counted apart), from /proc."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


# ---------------------------------------------------------------- handshakes
#
# Ranks order themselves through marker files in $HB_TEST_OUT (fresh for
# every launch), never through sleeps and never through hbcore itself (the
# thing under test): a rank that must act after its peers waits for their
# markers.

def signal_peers(name: str) -> None:
    """Creates the marker ``name`` (e.g. ``"timed-out.1"``)."""
    if not OUT_DIR:
        raise RuntimeError("handshakes need HB_TEST_OUT (run under the "
                           "test harness)")
    _write_atomic(os.path.join(OUT_DIR, "marker." + name), "")


def await_peers(names: Sequence[str], timeout: float = 60.0) -> None:
    """Returns once every marker in ``names`` exists; CaseFailure after
    ``timeout`` seconds (a peer failed before it signalled)."""
    if not OUT_DIR:
        raise RuntimeError("handshakes need HB_TEST_OUT (run under the "
                           "test harness)")
    deadline = time.monotonic() + timeout
    paths = [os.path.join(OUT_DIR, "marker." + n) for n in names]
    while True:
        missing = [n for n, p in zip(names, paths) if not os.path.exists(p)]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise CaseFailure("peers never signalled %s" % missing)
        time.sleep(0.002)  # polls the marker files; orders nothing


def wait_poll(handle: Any, poll: Callable[[Any], bool],
              timeout: float = 30.0) -> None:
    """Polls until done; fails instead of hanging."""
    deadline = time.monotonic() + timeout
    while not poll(handle):
        if time.monotonic() > deadline:
            raise CaseFailure("poll() still False after %ss" % timeout)
        time.sleep(0.001)


# The most steps a tuning rank script runs (tests/rank_scripts/autotune.py,
# tests/tf/rank_scripts/autotune_tf.py) waiting for the proposals it wants:
# far more than any job needs, so that a tuner that never proposes ends the
# job with a short history (the test names it) well before the test's
# timeout.
MAX_TUNING_STEPS = 5000


def train_while_tuning(step: Callable[[int], bool], min_steps: int,
                       proposals: int,
                       stop_flag: Callable[[bool], bool]) -> bool:
    """Runs ``step(i)`` for at least ``min_steps`` steps and until this job
    has applied ``proposals`` autotune proposals: how many samples the tuner
    closes in a fixed number of steps depends on how fast its thread gets
    the CPU, so a fixed step count is a race on a loaded machine.

    Rank 0 decides (its record of applied proposals is the same as every
    rank's, cycle for cycle) and ``stop_flag(decision)`` carries its
    decision to every rank (a broadcast from rank 0 through the front end
    under test), so every rank stops after the same step.

    Args:
        step: one training step; returns True when its results matched.
        min_steps: steps run whatever the tuner does.
        proposals: applied proposals to wait for (0: none).
        stop_flag: broadcasts rank 0's boolean to every rank.

    Returns:
        True when every step's results matched.
    """
    from hbcore._native import core
    ok = True
    for i in range(MAX_TUNING_STEPS):
        ok = step(i) and ok
        done = i + 1 >= min_steps and (
            len(core.autotune_history()) >= proposals)
        if stop_flag(done):
            break
    return ok
