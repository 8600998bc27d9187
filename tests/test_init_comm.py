"""hbcore.init(comm=...): a job over part of MPI_COMM_WORLD, given as an
mpi4py communicator or a list of ranks (Horovod's init(comm=...)), and the
errors for a bad ``comm``."""
import pytest

from support.harness import run_ranks, script_path


@pytest.mark.parametrize("mode,np", [("split", 3), ("split", 4),
                                     ("list", 3)])
def test_runtime_over_part_of_the_world(mode, np):
    run = run_ranks(script_path("init_comm.py"), np, timeout=90, args=[mode])
    run.assert_ok()
    for rank, result in run.results.items():
        assert result["rank"] == result["expected_rank"], (rank, result)
        assert result["size"] == result["expected_size"], (rank, result)
        assert result["local_size"] == result["size"], (rank, result)
        assert result["world_sum"] == np * (np - 1) // 2, (rank, result)
    run.assert_cases(["collectives"])


def test_bad_comm_is_rejected_on_every_rank():
    run = run_ranks(script_path("init_comm.py"), 2, timeout=90,
                    args=["errors"])
    run.assert_ok()
    for rank, result in run.results.items():
        assert result["string"]["type"] == "TypeError", result
        assert "list of ranks or an mpi4py communicator" in (
            result["string"]["message"])
        assert result["out_of_range"]["type"] == "ValueError", result
        assert "rank 2 is not a rank of MPI_COMM_WORLD (size 2)" in (
            result["out_of_range"]["message"])
        assert result["repeated"]["type"] == "ValueError", result
        assert "more than once" in result["repeated"]["message"]
        assert result["not_member"]["type"] == "ValueError", result
        assert "rank %d of MPI_COMM_WORLD) is not in the list" % rank in (
            result["not_member"]["message"])
        assert result["null"]["type"] == "InvalidArgumentError", result
        assert "MPI_COMM_NULL" in result["null"]["message"]
        for name in ("string", "out_of_range", "repeated", "not_member"):
            assert result[name + "_initialized"] is False, (name, result)
        assert result["size"] == 2 and result["rank"] == rank
    run.assert_cases(["collectives"])
