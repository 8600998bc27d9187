"""hb.context / hb.Context and the HybridBackend options at 2 and 3 ranks:
one hbrun launch per rank count (with HB_* option variables set) runs
every case of tests/tf/rank_scripts/hb_context.py; each case is a test.
"""
from support.harness import emulated_hosts
from support.tf_launch import (REQUIRES_TF, case_names, launch,
                               rank_script_tests)

pytestmark = REQUIRES_TF

SCRIPT = "hb_context.py"
# The variables the rank script expects (its ENV); kept literal here so
# the pytest process does not import TensorFlow.
ENV = {"HB_GRAD_NBUCKETS": "2", "HB_DATA_SYNC_DROP_REMAINDER": "false",
       "HB_COMM_DEFAULT": "mpi", "HB_EMB_WIRE_DTYPE": "float16",
       "HB_STALL_CHECK_TIME_SECONDS": "5",
       "HB_STALL_SHUTDOWN_TIME_SECONDS": "60"}


def ranks_in_order(run):
    """Every rank's initial rank is its rank."""
    assert [run.results[r]["initial_rank"] for r in range(run.np)] == \
        list(range(run.np)), run.results


test_launch_is_clean, test_case, _ = rank_script_tests(
    SCRIPT, env=ENV, timeout=240, check_launch=ranks_in_order)


def test_local_devices_on_emulated_hosts():
    """Two emulated hosts with 2 and 1 ranks: local_devices lists the
    ranks of this rank's host (every case runs again there)."""
    hbrun_args, env = emulated_hosts([2, 1])
    env.update(ENV)
    run = launch(SCRIPT, 3, env=env, timeout=240, hbrun_args=hbrun_args)
    run.assert_ok()
    run.assert_cases(case_names(SCRIPT))
