"""add_process_set's rank-list checks at 2 and 3 ranks
(tests/rank_scripts/process_set_args.py, HB_DYNAMIC_PROCESS_SETS=1): an
empty list is a ValueError as in Horovod 0.28.1 (not a MismatchError from
the negotiation), out-of-range and repeated ranks are ValueErrors naming
the rank, an unknown process_set_id a ValueError naming it, all raised by the calling rank alone before anything collective
(the ranks that made no bad call then add a set together with the others
and use it).
"""
import pytest

from support.harness import cached_ranks, script_path

NPS = [2, 3]
CASES = ["empty_on_rank0", "out_of_range_on_last", "repeated_everywhere",
         "unknown_id_everywhere", "valid_add_after"]
def args_run(np_):
    return cached_ranks(script_path("process_set_args.py"), np_, timeout=60,
                        env={"HB_DYNAMIC_PROCESS_SETS": "1"})


@pytest.mark.parametrize("np_", NPS)
def test_launch_is_clean(np_):
    """Every rank finishes (no hang), exits 0 and reports."""
    args_run(np_).assert_ok()


@pytest.mark.parametrize("np_", NPS)
@pytest.mark.parametrize("case", CASES)
def test_case(np_, case):
    args_run(np_).assert_cases([case])


def test_tf_front_end_shares_the_entry_point():
    """hbcore_tf.process_sets has no add_process_set of its own: it
    re-exports hbcore's (checked from the source, without importing
    TensorFlow)."""
    import ast
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "hbcore_tf", "process_sets.py")
    with open(path) as f:
        tree = ast.parse(f.read())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    imported = {(n.module, a.name) for n in tree.body
                if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "add_process_set" not in defined
    assert ("hbcore.process_sets", "add_process_set") in imported
