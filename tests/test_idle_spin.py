"""HB_IDLE_SPIN: after a cycle the background thread watches its queue for
a moment before sleeping, when the host has a CPU for each local rank's
background and calling threads (auto), always (1) or never (0). Threads
waiting for a result spin only under that same CPU rule (hb_spin_wait),
whatever the knob says, and the control plane's waits test for 30 us
before they sleep, or, without that CPU for each thread, for 1 ms while
yielding the CPU (wait_policy.h). The decisions are read from the
runtime's DEBUG log; results with the spin forced on at 2 and 3 ranks (on this 2-CPU
machine auto turns it off there) are checked against numpy by the
ordering script."""
import os
import re

import pytest

from support.harness import assert_bad_value_fails_init, run_ranks, script_path

CPUS = sorted(os.sched_getaffinity(0))


def _spin_state(run):
    states = re.findall(r"idle spin (on|off) \(HB_IDLE_SPIN=(\w+)\), waiters "
                        r"spin (on|off), control waits test (\d+ us(?: yielding)?)"
                        r" \((\d+) CPUs for (\d+) local ranks\)",
                        run.stdout + run.stderr)
    assert len(states) == run.np, run.describe()
    return states


@pytest.mark.parametrize("np_, value, cpus", [
    (1, None, len(CPUS)),   # auto with the whole machine
    (1, None, 1),           # auto confined to one CPU
    (2, None, len(CPUS)),
    (3, None, len(CPUS)),
    (2, "1", len(CPUS)),
    (1, "0", len(CPUS)),
    (2, "true", 1),
])
def test_spin_rule(np_, value, cpus):
    env = {"HB_LOG_LEVEL": "DEBUG"}
    if value is not None:
        env["HB_IDLE_SPIN"] = value
    wrapper = ["taskset", "-c", str(CPUS[0])] if cpus == 1 else []
    run = run_ranks(script_path("short_job.py"), np_, timeout=60, env=env,
                    wrapper=wrapper)
    run.assert_ok()
    spare = "on" if 2 * np_ <= cpus else "off"
    control = "30 us" if spare == "on" else "1000 us yielding"
    if value is None:
        want, shown = spare, "auto"
    else:
        want = "on" if value in ("1", "true") else "off"
        shown = "1" if want == "on" else "0"
    for state in _spin_state(run):
        assert state == (want, shown, spare, control, str(cpus), str(np_)), (
            state, run.describe())


@pytest.mark.parametrize("np_", [2, 3])
def test_bad_value_fails_init(np_):
    assert_bad_value_fails_init("HB_IDLE_SPIN", "sometimes", np_)


@pytest.mark.parametrize("np_", [2, 3])
def test_results_with_spin_forced_on(np_):
    run = run_ranks(script_path("ordering.py"), np_, timeout=90,
                    args=["order", 50], env={"HB_IDLE_SPIN": "1"})
    assert not run.timed_out, "deadlock? " + run.describe()
    run.assert_cases(["order/round0", "order/round1"])
    run.assert_ok()
