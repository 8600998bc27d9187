"""Rank script: configuration from HB_* / HOROVOD_* variables and from
hbcore.init(config=...).

    python config_check.py singleton     (no launcher: a singleton MPI job)
    hbrun -np N python config_check.py per-rank
    hbrun -np N python config_check.py expect-error FRAGMENT...

singleton: for each bad value, sets the variable, calls hbcore.init() and
records the exception (type, message) it raised; then valid values,
including HOROVOD_ aliases, must initialise. The bad values fail before MPI
is touched, so one process can try them all.

expect-error: init must raise ConfigError containing every FRAGMENT (the
launch sets the bad variable).

per-rank: a setting that must agree across ranks (HB_CACHE_CAPACITY,
HB_FUSION_THRESHOLD, HB_SHM_ALLREDUCE_THRESHOLD) differs on rank 0; init must fail on every rank with
ConfigError naming it; with the values fixed, init works.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, env_rank, env_size,  # noqa: E402
                    exc_info, expect_raises, report)

import hbcore as hb  # noqa: E402
import hbcore.basics  # noqa: E402,F401  (hb.basics.defer_config)
from hbcore import exceptions as hx  # noqa: E402

# (case, {var: value}, fragments the message must contain)
BAD = [
    ("fusion-threshold-abc", {"HB_FUSION_THRESHOLD": "abc"},
     ["HB_FUSION_THRESHOLD", "abc"]),
    ("horovod-cycle-time-negative", {"HOROVOD_CYCLE_TIME": "-1"},
     ["HOROVOD_CYCLE_TIME", "-1"]),
    ("log-level-bogus", {"HB_LOG_LEVEL": "bogus"}, ["HB_LOG_LEVEL", "bogus"]),
    ("horovod-log-level-bogus", {"HOROVOD_LOG_LEVEL": "loud"},
     ["HOROVOD_LOG_LEVEL", "loud"]),
    ("fusion-threshold-fraction", {"HB_FUSION_THRESHOLD": "1.5"},
     ["HB_FUSION_THRESHOLD", "1.5"]),
    ("fusion-threshold-negative", {"HB_FUSION_THRESHOLD": "-64"},
     ["HB_FUSION_THRESHOLD", "-64"]),
    ("horovod-fusion-threshold-suffix", {"HOROVOD_FUSION_THRESHOLD": "64MB"},
     ["HOROVOD_FUSION_THRESHOLD", "64MB"]),
    ("cycle-time-text", {"HB_CYCLE_TIME": "fast"}, ["HB_CYCLE_TIME", "fast"]),
    ("cycle-time-huge", {"HB_CYCLE_TIME": "1e9"}, ["HB_CYCLE_TIME"]),
    ("shm-allreduce-threshold-text", {"HB_SHM_ALLREDUCE_THRESHOLD": "big"},
     ["HB_SHM_ALLREDUCE_THRESHOLD", "big"]),
    ("horovod-hierarchical-allreduce-maybe",
     {"HOROVOD_HIERARCHICAL_ALLREDUCE": "maybe"},
     ["HOROVOD_HIERARCHICAL_ALLREDUCE", "maybe"]),
    ("cache-capacity-negative", {"HB_CACHE_CAPACITY": "-5"},
     ["HB_CACHE_CAPACITY", "-5"]),
    ("stall-check-text", {"HB_STALL_CHECK_TIME_SECONDS": "soon"},
     ["HB_STALL_CHECK_TIME_SECONDS", "soon"]),
    ("stall-shutdown-negative", {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "-3"},
     ["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-3"]),
    ("stall-check-disable-bogus", {"HB_STALL_CHECK_DISABLE": "maybe"},
     ["HB_STALL_CHECK_DISABLE", "maybe"]),
    # HB_ wins over the HOROVOD_ alias, so its bad value is the one named.
    ("hb-name-wins-when-bad", {"HB_FUSION_THRESHOLD": "abc",
                               "HOROVOD_FUSION_THRESHOLD": "1024"},
     ["HB_FUSION_THRESHOLD", "abc"]),
]

# (case, {var: value}, lines expected in the effective configuration)
GOOD = [
    ("horovod-aliases-accepted",
     {"HOROVOD_FUSION_THRESHOLD": "1048576", "HOROVOD_CYCLE_TIME": "2.5",
      "HOROVOD_CACHE_CAPACITY": "64", "HOROVOD_LOG_LEVEL": "warning",
      "HOROVOD_STALL_CHECK_TIME_SECONDS": "30"},
     ["HB_FUSION_THRESHOLD=1048576", "HB_CYCLE_TIME=2.5",
      "HB_CACHE_CAPACITY=64", "HB_STALL_CHECK_TIME_SECONDS=30"]),
    ("hb-name-wins-over-alias",
     {"HB_FUSION_THRESHOLD": "2048", "HOROVOD_FUSION_THRESHOLD": "abc"},
     ["HB_FUSION_THRESHOLD=2048"]),
    ("hb-names-accepted",
     {"HB_FUSION_THRESHOLD": "0", "HB_CYCLE_TIME": "0.5",
      "HB_CACHE_CAPACITY": "0", "HB_LOG_LEVEL": "ERROR",
      "HB_STALL_CHECK_DISABLE": "1"},
     ["HB_FUSION_THRESHOLD=0", "HB_CYCLE_TIME=0.5", "HB_CACHE_CAPACITY=0"]),
    # Bools take HybridBackend's words, hbcore_tf's and Horovod's numbers
    # (tests/test_setting_values.py has the whole table).
    ("bool-word-yes", {"HOROVOD_STALL_CHECK_DISABLE": "Yes"},
     ["HB_STALL_CHECK_TIME_SECONDS=0"]),
    ("bool-number-2", {"HB_STALL_CHECK_DISABLE": "2"},
     ["HB_STALL_CHECK_TIME_SECONDS=0"]),
    ("bool-word-off", {"HB_STALL_CHECK_DISABLE": "OFF"},
     ["HB_STALL_CHECK_TIME_SECONDS=60"]),
]


# Programmatic configuration, hbcore.init(config=...): (case, config,
# environment, fragments the ConfigError must contain).
BAD_CONFIG = [
    ("config-fusion-threshold-text", {"fusion_threshold": "abc"}, {},
     ["config key 'fusion_threshold' (HB_FUSION_THRESHOLD)", "'abc'"]),
    ("config-cycle-time-negative", {"cycle_time": -1}, {},
     ["config key 'cycle_time' (HB_CYCLE_TIME)", "'-1'"]),
    ("config-cache-capacity-bool", {"cache_capacity": True}, {},
     ["config key 'cache_capacity'", "'true'"]),
    ("config-unknown-knob", {"fusion_treshold": 1}, {},
     ["unknown configuration knob 'fusion_treshold'"]),
    # A good override does not hide a bad variable of another knob.
    ("config-does-not-hide-bad-env", {"cycle_time": 2},
     {"HB_CACHE_CAPACITY": "-5"}, ["HB_CACHE_CAPACITY", "-5"]),
]

# (case, config, environment, lines expected in the effective configuration)
GOOD_CONFIG = [
    ("config-values-applied",
     {"fusion_threshold": 4096, "cycle_time": 0.25, "cache_capacity": 64,
      "stall_check_disable": True, "log_level": "error"},
     {}, ["HB_FUSION_THRESHOLD=4096", "HB_CYCLE_TIME=0.25",
          "HB_CACHE_CAPACITY=64", "HB_STALL_CHECK_TIME_SECONDS=0",
          "HB_LOG_LEVEL=ERROR"]),
    # The override wins over a variable, even a bad one, and the alias.
    ("config-wins-over-env", {"fusion_threshold": 8192},
     {"HB_FUSION_THRESHOLD": "abc", "HOROVOD_FUSION_THRESHOLD": "1"},
     ["HB_FUSION_THRESHOLD=8192"]),
    # None leaves the knob to the environment.
    ("config-none-leaves-env", {"cycle_time": None},
     {"HOROVOD_CYCLE_TIME": "3"}, ["HB_CYCLE_TIME=3"]),
]


class Env:
    """Sets variables for the duration of a with block."""

    def __init__(self, values):
        self.values = values
        self.saved = {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def config_string() -> str:
    core = sys.modules["hbcore._native"].core
    return core.config_string() if hasattr(core, "config_string") else ""


def expect_config_error(fragments, config=None):
    try:
        hb.init(config=config)
    except Exception as exc:  # noqa: BLE001
        info = exc_info(exc)
        if type(exc) is not hx.ConfigError:
            raise CaseFailure("expected ConfigError, got %s: %s"
                              % (info["type"], info["message"]))
        if not isinstance(exc, ValueError):
            raise CaseFailure("ConfigError is not a ValueError")
        missing = [f for f in fragments if f not in str(exc)]
        if missing:
            raise CaseFailure("message %r lacks %r" % (str(exc), missing))
        if hb.is_initialized():
            raise CaseFailure("is_initialized() True after a failed init")
        return
    hb.shutdown()
    raise CaseFailure("init() accepted the bad value")


def expect_lines(lines) -> None:
    """The effective configuration has every line of ``lines``, and a
    singleton allreduce works with it."""
    text = config_string()
    missing = [l for l in lines if l not in text.splitlines()]
    if missing:
        raise CaseFailure("effective configuration lacks %s:\n%s"
                          % (missing, text))
    out = hb.allreduce(np.arange(3.0), op=hb.Sum)
    if out.tolist() != [0.0, 1.0, 2.0]:
        raise CaseFailure("singleton allreduce gave %s" % out)


def singleton(checker: Checker) -> None:
    for name, values, fragments in BAD:
        with Env(values):
            checker.run("bad/" + name,
                        lambda fragments=fragments: expect_config_error(
                            fragments))
    for name, values, lines in GOOD:
        def good(values=values, lines=lines):
            with Env(values):
                hb.init()
            try:
                text = config_string()
                missing = [l for l in lines if l not in text.splitlines()]
                if text and missing:
                    raise CaseFailure("effective configuration lacks %s:\n%s"
                                      % (missing, text))
                out = hb.allreduce(np.arange(3.0), name="cfg." + name,
                                   op=hb.Sum)
                if out.tolist() != [0.0, 1.0, 2.0]:
                    raise CaseFailure("singleton allreduce gave %s" % out)
            finally:
                hb.shutdown()
        checker.run("good/" + name, good)

    for name, config, env, fragments in BAD_CONFIG:
        def bad(config=config, env=env, fragments=fragments):
            with Env(env):
                expect_config_error(fragments, config)
        checker.run("bad/" + name, bad)
    for name, config, env, lines in GOOD_CONFIG:
        def good_config(config=config, env=env, lines=lines):
            with Env(env):
                hb.init(config=config)
            try:
                expect_lines(lines)
            finally:
                hb.shutdown()
        checker.run("good/" + name, good_config)

    def deferred():
        # What a library deferred (DistributedOptimizer(bucket_cap_mb=...))
        # applies at the next init, beneath init's own config, and never
        # touches os.environ.
        before = dict(os.environ)
        hb.basics.defer_config({"cache_capacity": 32, "cycle_time": 4})
        try:
            if dict(os.environ) != before:
                raise CaseFailure("defer_config changed os.environ")
            hb.init(config={"cycle_time": 2})
            try:
                expect_lines(["HB_CACHE_CAPACITY=32", "HB_CYCLE_TIME=2"])
            finally:
                hb.shutdown()
        finally:
            hb.basics.defer_config({"cache_capacity": None,
                                    "cycle_time": None})
        hb.init()
        try:
            expect_lines(["HB_CACHE_CAPACITY=1024", "HB_CYCLE_TIME=1"])
        finally:
            hb.shutdown()
        expect_raises(lambda: hb.basics.defer_config({"cycle_time": "soon"}),
                      hx.ConfigError, "config key 'cycle_time'", "'soon'")
    checker.run("good/config-deferred", deferred)

    def bad_timeline():
        with Env({"HB_TIMELINE": "/nonexistent-dir/sub/tl.json"}):
            expect_config_error(["HB_TIMELINE", "/nonexistent-dir/sub/tl.json"])
        hb.init()  # and a later init with a good setting works
        hb.shutdown()
    checker.run("bad/timeline-unwritable", bad_timeline)


def per_rank(checker: Checker) -> None:
    rank = env_rank()
    for var, odd, normal in (("HB_CACHE_CAPACITY", "512", "1024"),
                             ("HB_FUSION_THRESHOLD", "1048576", "67108864"),
                             ("HB_SHM_ALLREDUCE_THRESHOLD", "0", "4194304"),
                             ("HB_HIERARCHICAL_ALLREDUCE", "0", "auto"),
                             ("HB_HIERARCHICAL_ALLGATHER", "1", "0"),
                             ("HB_RING_ALLREDUCE", "1", "0"),
                             ("HB_FAST_PATH_THRESHOLD", "0", "8192")):
        def differs(var=var, odd=odd, normal=normal):
            with Env({var: odd if rank == 0 else normal}):
                expect_config_error([var])
        checker.run("per-rank/%s-differs" % var, differs)

    def config_differs():
        # The same agreement check covers programmatic values.
        expect_config_error(["HB_FUSION_THRESHOLD", "same on every rank"],
                            {"fusion_threshold": 4096 if rank == 0 else 8192})
    checker.run("per-rank/config-differs", config_differs)

    def fixed():
        with Env({"HB_CACHE_CAPACITY": "256"}):
            hb.init()
        size = hb.size()
        out = hb.allreduce(np.full(3, rank, np.int64), name="fixed", op=hb.Sum)
        if out.tolist() != [sum(range(size))] * 3:
            raise CaseFailure("allreduce after the fix gave %s" % out)
        hb.shutdown()
    checker.run("per-rank/init-after-fix", fixed)


def main() -> None:
    mode = sys.argv[1]
    checker = Checker()
    if mode == "singleton":
        singleton(checker)
    elif mode == "expect-error":
        # The environment already holds a bad value for sys.argv[2].
        checker.run("expect-error", lambda: expect_config_error(sys.argv[2:]))
    else:
        per_rank(checker)
    result = {"ok": checker.all_ok, "size": env_size(),
              "cases": checker.results}
    report(result)


if __name__ == "__main__":
    main()
