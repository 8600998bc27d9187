"""The submission paths of the Python front end (core.submit_one for one
tensor, core.submit for a group, the Handle they return), in a singleton
job; see tests/rank_scripts/submit_paths.py for what each case checks."""
import pytest

from support.harness import cached_single, script_path
from rank_scripts.submit_paths import CASES

def singleton_run():
    return cached_single(script_path("submit_paths.py"), timeout=90)


def test_run_completes():
    singleton_run().assert_ok()


@pytest.mark.parametrize("case", [name for name, _ in CASES])
def test_case(case):
    singleton_run().assert_cases([case])
