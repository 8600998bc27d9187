"""hbcore_tf's collectives at 2 and 3 ranks: every op x dtype x shape in
eager mode, inside one tf.function and in one tf.compat.v1 Session.run;
fusion; v1 hooks; errors; join; shutdown (gradients: test_gradients.py;
IndexedSlices: test_sparse.py).

One hbrun launch per rank count runs tests/tf/rank_scripts/tf_ops.py
(every rank checks each result against numpy computed from every rank's
recomputed, rank-seeded inputs); the tests below assert groups of its
cases on every rank, so a failure names exactly what broke.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "rank_scripts"))
sys.path.insert(0, os.path.join(HERE, "rank_scripts"))     # op_table

from support.tf_launch import op_launch  # noqa: E402
import op_table  # noqa: E402

NPS = [2, 3]
SCRIPT = "tf_ops.py"
TIMEOUT_S = 240


def tf_run(np_):
    """The launch for np_ ranks, run once per test session (a
    desynchronised case becomes an error within seconds instead of a hang
    that only the hard timeout ends: op_launch's stall settings)."""
    return op_launch(SCRIPT, np_, timeout=TIMEOUT_S)


def table_cases(np_, group):
    mode, kind = group.split("/")
    return ["%s/%s" % (mode, spec.key)
            for spec in op_table.build_specs(np_, 0)
            if spec.key.split("/")[0] == kind]


@pytest.mark.parametrize("np_", NPS)
def test_job_exits_cleanly(np_):
    """The launch ends by itself with exit 0 and every rank reports."""
    tf_run(np_).assert_ok()


@pytest.mark.parametrize("group", op_table.group_names())
@pytest.mark.parametrize("np_", NPS)
def test_op_table(np_, group):
    """Every op x dtype x shape of one kind, in one mode."""
    names = table_cases(np_, group)
    assert names, group
    tf_run(np_).assert_cases(names)


BEFORE_INIT = ["allreduce", "grouped_allreduce", "allgather",
               "grouped_allgather", "broadcast", "alltoall", "reducescatter",
               "join", "barrier", "broadcast_object", "rank", "size",
               "size_op", "is_initialized"]


@pytest.mark.parametrize("np_", NPS)
def test_before_init(np_):
    """Collectives raise ValueError before init; size_op fails at run."""
    tf_run(np_).assert_cases(["before-init/" + c for c in BEFORE_INIT])


@pytest.mark.parametrize("np_", NPS)
def test_fusion(np_):
    """grouped_allreduce of 50 tensors is one fused batch; 50 allreduces in
    one tf.function are not chained by auto control deps and fuse."""
    run = tf_run(np_)
    run.assert_cases(["fusion/grouped50", "fusion/function50"])
    facts = run.results[0]
    assert "timeline" in facts, facts.get("timeline_error")
    grouped = facts["timeline"]["grouped50"]
    assert grouped == {"tensors": 50, "allreduce_batches": 1,
                       "fused_batches": 1}, grouped
    function = facts["timeline"]["function50"]
    assert function["tensors"] == 50 and function["fused_batches"] >= 1
    # 3 steps of 50; one batch per tensor (150) would mean no fusion.
    assert function["allreduce_batches"] <= 30, function


@pytest.mark.parametrize("np_", NPS)
def test_fast_path_carries_repeated_small_allreduces(np_):
    """A small allreduce repeated under one name (10 steps, eager Average
    and tf.function Sum) gives numpy's values and, once cached, rides the
    negotiation's collective: rank 0's timeline shows FAST_PATH_ALLREDUCE
    events for most steps after the first (docs/architecture.md, "Small
    tensors in one round trip")."""
    run = tf_run(np_)
    run.assert_cases(["fastpath/eager", "fastpath/function"])
    facts = run.results[0]
    assert "timeline" in facts, facts.get("timeline_error")
    carried = facts["timeline"]["fastpath"]
    assert carried["eager"] >= 5 and carried["function"] >= 5, carried


@pytest.mark.parametrize("np_", NPS)
def test_v1_graphs(np_):
    """tf.compat.v1 gradients, broadcast_global_variables,
    BroadcastGlobalVariablesHook under MonitoredTrainingSession, barrier."""
    tf_run(np_).assert_cases([
        "graph/gradients", "graph/broadcast_global_variables",
        "graph/hook-monitored-session", "graph/barrier"])


@pytest.mark.parametrize("np_", NPS)
def test_errors(np_):
    """Mismatch -> FailedPreconditionError on every rank (eager,
    tf.function, v1 graph); bad local arguments -> InvalidArgumentError;
    Adasum -> NotImplementedError; the runtime keeps working after."""
    tf_run(np_).assert_cases(["errors/" + c for c in [
        "mismatch-shape", "mismatch-dtype", "mismatch-op", "mismatch-root",
        "mismatch-function", "mismatch-graph", "invalid-root-high",
        "invalid-root-negative", "alltoall-splits-sum",
        "alltoall-splits-length", "alltoall-uneven", "allgather-scalar",
        "bool-average", "adasum-allreduce", "adasum-grouped_allreduce",
        "adasum-reducescatter", "average-and-op", "process-set",
        "broadcast_global_variables-eager", "recovered"]])


@pytest.mark.parametrize("np_", NPS)
def test_misc(np_):
    """Topology ops, aliases, objects, broadcast_variables, compression,
    naming, join with uneven steps."""
    tf_run(np_).assert_cases(["misc/" + c for c in [
        "topology", "aliases", "objects", "broadcast_variables",
        "compression", "reducescatter-compression", "naming",
        "join-uneven"]])


@pytest.mark.parametrize("np_", NPS)
def test_output_buffers(np_):
    """Allreduce/broadcast outputs: taken-over inputs (in place), recycled
    buffers never reused while a tensor holds them, inputs still read
    elsewhere left intact; unnamed eager calls reusing one name with new
    shapes."""
    tf_run(np_).assert_cases(["buffers/" + c for c in [
        "outputs-kept-while-used", "in-place", "eager-inputs-kept",
        "unnamed-eager-shapes"]])


@pytest.mark.parametrize("np_", NPS)
def test_shutdown(np_):
    """A pending op fails with UnknownError when a peer shuts down; calls
    after shutdown raise ValueError."""
    tf_run(np_).assert_cases(["shutdown/pending-op-fails",
                              "shutdown/after"])


@pytest.mark.parametrize("np_", NPS)
def test_graph_names_agree_across_ranks(np_):
    """The same program gives the same core names on every rank, unique
    within a graph, prefixed by the tf.function's name."""
    run = tf_run(np_)
    run.assert_ok()
    for key, prefix in (("function_names", "all_ops:"),
                        ("graph_names", "table/")):
        names = run.results[0][key]
        assert names and len(names) == len(set(names)), key
        assert all(n.startswith(prefix) for n in names), names[:5]
        for rank in range(1, np_):
            assert run.results[rank][key] == names, (key, rank)
