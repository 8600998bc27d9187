"""Configuration: bad HB_* / HOROVOD_* values and bad init(config=...)
entries fail init with ConfigError naming the variable or knob; valid
values, HOROVOD_ aliases and programmatic values (which win over the
environment) are accepted; the settings that must agree across ranks are
checked at init.

The single-process cases run without a launcher (hbcore.init() makes a
singleton MPI job), all in one process: a bad value fails before MPI is
touched, so the process can try the next one.
"""
import pytest

from support.harness import (cached_single, run_python, run_ranks,
                             script_path)
from rank_scripts.config_check import BAD, BAD_CONFIG, GOOD, GOOD_CONFIG

SCRIPT = script_path("config_check.py")
def singleton_run():
    return cached_single(SCRIPT, ["singleton"], timeout=60)


def test_singleton_run_completes():
    run = singleton_run()
    run.assert_ok()


@pytest.mark.parametrize("case", [c[0] for c in BAD + BAD_CONFIG]
                         + ["timeline-unwritable"])
def test_bad_value_fails_init(case):
    singleton_run().assert_cases(["bad/" + case])


@pytest.mark.parametrize("case", [c[0] for c in GOOD + GOOD_CONFIG]
                         + ["config-deferred"])
def test_good_values_accepted(case):
    singleton_run().assert_cases(["good/" + case])


def test_debug_level_prints_effective_configuration():
    run = run_python(
        "import hbcore; hbcore.init(); hbcore.shutdown()",
        env={"HB_LOG_LEVEL": "DEBUG", "HOROVOD_FUSION_THRESHOLD": "4096"},
        timeout=60)
    assert run.returncode == 0, run.describe()
    assert "HB_FUSION_THRESHOLD=4096" in run.stderr, run.describe()


def test_default_level_is_quiet():
    run = run_python("import hbcore; hbcore.init(); hbcore.shutdown()",
                     timeout=60)
    assert run.returncode == 0, run.describe()
    assert "HB_FUSION_THRESHOLD" not in run.stderr, run.describe()


@pytest.mark.parametrize("var,value", [("HB_FUSION_THRESHOLD", "abc"),
                                       ("HOROVOD_CYCLE_TIME", "-1")])
def test_config_error_on_every_rank_under_launcher(var, value):
    """Under hbrun, a bad value fails init on every rank (no hang)."""
    run = run_ranks(SCRIPT, 2, timeout=60, env={var: value},
                    args=["expect-error", var, value])
    assert not run.timed_out, run.describe()
    run.assert_cases(["expect-error"])
    run.assert_ok()


PER_RANK_CASES = ["per-rank/HB_CACHE_CAPACITY-differs",
                  "per-rank/HB_FUSION_THRESHOLD-differs",
                  "per-rank/HB_SHM_ALLREDUCE_THRESHOLD-differs",
                  "per-rank/HB_HIERARCHICAL_ALLREDUCE-differs",
                  "per-rank/HB_HIERARCHICAL_ALLGATHER-differs",
                  "per-rank/HB_RING_ALLREDUCE-differs",
                  "per-rank/HB_FAST_PATH_THRESHOLD-differs",
                  "per-rank/config-differs",
                  "per-rank/init-after-fix"]


@pytest.mark.parametrize("np_", [2, 3])
def test_settings_that_must_agree_across_ranks(np_):
    run = run_ranks(SCRIPT, np_, timeout=60, args=["per-rank"])
    assert not run.timed_out, run.describe()
    run.assert_cases(PER_RANK_CASES)
    run.assert_ok()
