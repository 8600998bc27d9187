"""Loads the MPI library and the native core, once per process.

libhbcore.so is linked against libmpi by soname (libmpi.so.12, the MPICH
ABI). Loading the library here first, with RTLD_GLOBAL, makes the dynamic
linker reuse it for the core, mpi4py and the TF op library alike, so a
process has exactly one MPI. Search order: $HB_MPI_LIBRARY (a site MPI),
the mpich wheel in this Python's prefix, then the system's library path.
"""
import ctypes
import os
import sys
from typing import Optional

_MPI_SONAMES = ("libmpi.so.12", "libmpi.so")


def _candidates():
    override = os.environ.get("HB_MPI_LIBRARY")
    if override:
        yield override
        return
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        for name in _MPI_SONAMES:
            yield os.path.join(prefix, "lib", name)
    yield from _MPI_SONAMES


def load_mpi() -> Optional[str]:
    """Loads libmpi globally; returns the path loaded, or None."""
    errors = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    if os.environ.get("HB_MPI_LIBRARY"):
        raise ImportError("hbcore: cannot load HB_MPI_LIBRARY=%s: %s"
                          % (os.environ["HB_MPI_LIBRARY"], "; ".join(errors)))
    # Else rely on the dynamic linker (rpath of libhbcore, ld.so.conf).
    return None


MPI_LIBRARY = load_mpi()

from hbcore import _core  # noqa: E402  (needs libmpi loaded first)

core = _core
