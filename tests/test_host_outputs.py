"""The numpy API's pool of output arrays (csrc/python/host_outputs.h):
the pool's own rules without MPI, then the out-of-place collectives over
it at 2 and 3 ranks (rank_scripts/host_outputs.py)."""
import numpy as np
import pytest

from support.harness import run_ranks, script_path
from hbcore._native import core

SCRIPT = script_path("host_outputs.py")
MIB = 1 << 20


def test_empty_gives_a_writeable_c_contiguous_array():
    pool = core.HostOutputPool()
    a = pool.empty([3, 5, 7], np.dtype(np.int16))
    assert a.shape == (3, 5, 7) and a.dtype == np.int16
    assert a.flags.c_contiguous and a.flags.writeable
    a[...] = np.arange(105, dtype=np.int16).reshape(3, 5, 7)
    assert int(a.sum()) == sum(range(105))
    assert pool.leased_bytes == 3 * 5 * 7 * 2
    assert pool.empty([0, 4], np.dtype(np.float64)).shape == (0, 4)


def test_large_blocks_are_aligned_for_huge_pages():
    pool = core.HostOutputPool()
    a = pool.empty([3 * MIB], np.dtype(np.uint8))
    assert a.ctypes.data % (2 * MIB) == 0
    b = pool.empty([100], np.dtype(np.float32))
    assert b.ctypes.data % 64 == 0


def test_memory_returns_when_the_last_view_is_gone():
    pool = core.HostOutputPool()
    a = pool.empty([MIB // 4], np.dtype(np.float32))
    address = a.ctypes.data
    view = a[10:20]
    del a
    assert pool.leased_bytes == MIB and pool.free_bytes == 0
    del view
    assert pool.leased_bytes == 0 and pool.free_bytes == MIB
    again = pool.empty([MIB // 4], np.dtype(np.float32))
    assert again.ctypes.data == address
    assert pool.free_bytes == 0
    other = pool.empty([MIB // 8], np.dtype(np.float32))  # another size
    assert other.ctypes.data != address


def test_free_blocks_stay_within_the_peak_leased_at_once():
    pool = core.HostOutputPool()
    a = pool.empty([MIB], np.dtype(np.uint8))
    b = pool.empty([MIB], np.dtype(np.uint8))
    del a, b
    assert pool.free_bytes == 2 * MIB  # the loop's working set stays
    big = pool.empty([3 * MIB], np.dtype(np.uint8))
    big_address = big.ctypes.data
    # 2 + 3 MiB free would exceed the 3 MiB peak: the older blocks go.
    del big
    assert pool.free_bytes == 3 * MIB
    assert pool.leased_bytes == 0
    assert pool.empty([3 * MIB], np.dtype(np.uint8)).ctypes.data == \
        big_address


def test_a_new_size_evicts_the_least_recently_released():
    """Blocks of a past phase's sizes make room for the current ones,
    oldest first, instead of keeping them out of the pool."""
    pool = core.HostOutputPool()
    first = pool.empty([MIB], np.dtype(np.uint8))
    second = pool.empty([MIB], np.dtype(np.uint8))
    third = pool.empty([MIB], np.dtype(np.uint8))  # peak: 3 MiB leased
    first_address, second_address = first.ctypes.data, second.ctypes.data
    del third
    del first, second  # released in the order third, first, second
    assert pool.free_bytes == 3 * MIB
    two = pool.empty([2 * MIB], np.dtype(np.uint8))  # a fresh block
    del two  # needs 2 MiB of room: evicts third, then first
    assert pool.free_bytes == 3 * MIB
    kept = pool.empty([MIB], np.dtype(np.uint8))
    assert kept.ctypes.data == second_address != first_address
    assert pool.free_bytes == 2 * MIB  # the 2 MiB block: no 1 MiB left


def test_negative_dimension_is_a_value_error():
    pool = core.HostOutputPool()
    with pytest.raises(ValueError, match="negative dimension"):
        pool.empty([4, -1], np.dtype(np.float32))


@pytest.mark.parametrize("np_", [2, 3])
def test_outputs_are_right_distinct_and_reused(np_):
    run = run_ranks(SCRIPT, np_, timeout=120)
    assert not run.timed_out, run.describe()
    run.assert_ok()
    for rank in range(np_):
        result = run.results[rank]
        assert "error" not in result, (rank, result)
        for kind in ("allreduce", "grouped_allreduce", "broadcast",
                     "allgather", "grouped_allgather", "alltoall",
                     "reducescatter"):
            seen = result[kind]
            assert seen["wrong_steps"] == [], (rank, kind, seen)
            assert seen["distinct_while_alive"], (rank, kind, seen)
            assert seen["reused_after_drop"], (rank, kind, seen)
            assert seen["last_right"], (rank, kind, seen)
            assert seen["writeable"], (rank, kind, seen)


def test_free_blocks_are_capped():
    """A peak above the cap keeps at most the cap (pages never written
    are not resident, so the sizes cost no memory here)."""
    pool = core.HostOutputPool()
    cap = core.HostOutputPool.max_free_bytes
    block = cap // 2 + MIB
    a = pool.empty([block], np.dtype(np.uint8))
    b = pool.empty([block], np.dtype(np.uint8))
    del a, b
    assert pool.free_bytes == block <= cap
