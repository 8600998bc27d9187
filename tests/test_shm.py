"""Allreduces of a single-host job reduce through node shared memory
(see docs/architecture.md). When /dev/shm cannot hold the segment, init
still succeeds, rank 0 says why, and allreduces fall back to MPI with
the same results.

The full /dev/shm is a 6 MiB tmpfs mounted over it in a private mount
namespace (`unshare -m`), which needs root; elsewhere the test is skipped.
"""
import subprocess

import pytest

from support.harness import run_ranks, script_path
from rank_scripts import collectives

SMALL_SHM = ["unshare", "-m", "sh", "-c",
             'mount -t tmpfs -o size=6m tmpfs /dev/shm && exec "$@"', "sh"]


def _can_mount_private_shm() -> bool:
    try:
        return subprocess.run(SMALL_SHM + ["true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not _can_mount_private_shm(),
                    reason="needs root to mount a small /dev/shm")
def test_full_dev_shm_falls_back_to_mpi():
    # 2 ranks' 4 MiB input slots and the 4 MiB result area do not fit in
    # 6 MiB (MPICH needs some too).
    dtypes = ["float32", "int32"]
    run = run_ranks(script_path("collectives.py"), 2, timeout=120,
                    env={"HB_SHM_ALLREDUCE_THRESHOLD": "4194304"},
                    args=[",".join(dtypes)], wrapper=SMALL_SHM)
    assert not run.timed_out, run.describe()
    assert run.returncode == 0, run.describe()
    assert ("node shared-memory segment of 12582912 bytes unavailable"
            in run.stderr), run.describe()
    assert "allreduces use MPI instead" in run.stderr, run.describe()
    names = [name for name, _ in collectives.build_cases(2, 0, dtypes)
             if name.startswith(("grouped/", "allreduce/", "inplace/"))]
    assert len(names) > 20
    run.assert_cases(names)
