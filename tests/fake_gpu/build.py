"""Builds the fake CUDA runtime and NCCL (libfakecudart.so, libfakenccl.so).

    from fake_gpu.build import build
    paths = build()          # {"cudart": "/abs/.../libfakecudart.so",
                             #  "nccl": "/abs/.../libfakenccl.so"}

or ``python tests/fake_gpu/build.py``, which prints the two paths.

The libraries go to tests/fake_gpu/_build/ and are rebuilt only when one of
their sources (or this file) is newer than the library. Several processes
may call build() at once: they serialize on a lock file, and each library is
linked into a temporary file that replaces the old one atomically, so a
process never loads a half-written library.

libfakenccl.so has libfakecudart.so as a NEEDED library, found through
rpath $ORIGIN: whether hbcore dlopens the NCCL or the CUDA runtime first,
there is one fake CUDA runtime in the process (the one both were loaded
from). Both are linked with -z nodelete, since their worker threads may
still run their code when a loader dlcloses them.
"""
import fcntl
import os
import subprocess
import sys
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# gpu/gpu_abi.h, included by its path under the core's src/.
ABI_DIR = os.path.join(ROOT, "csrc", "core", "src")
BUILD_DIR = os.path.join(HERE, "_build")

CXXFLAGS = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-Wall",
            "-Wextra", "-fvisibility=hidden", "-I", HERE, "-I", ABI_DIR]
EXPORTS = os.path.join(HERE, "exports.map")
LDFLAGS = ["-Wl,--no-undefined", "-Wl,-z,nodelete",
           "-Wl,--version-script=" + EXPORTS]

_COMMON_HEADERS = ["fake_stream.h", "fake_handles.h", "exports.map"]
_CUDART_SOURCES = ["fake_cudart.cc", "fake_worker.cc"]
_CUDART_HEADERS = _COMMON_HEADERS + ["fake_worker.h"]
_NCCL_SOURCES = ["fake_nccl.cc", "fake_comm.cc", "fake_exchange.cc",
                 "fake_reduce.cc", "fake_shm.cc"]
_NCCL_HEADERS = _COMMON_HEADERS + ["fake_comm.h", "fake_exchange.h",
                                   "fake_reduce.h", "fake_half.h",
                                   "fake_shm.h"]


def _paths(names: List[str]) -> List[str]:
    return [os.path.join(HERE, name) for name in names]


def _stale(target: str, deps: List[str]) -> bool:
    if not os.path.exists(target):
        return True
    built = os.path.getmtime(target)
    return any(os.path.getmtime(dep) > built for dep in deps)


def _link(target: str, sources: List[str], extra: List[str]) -> None:
    """Compiles and links `sources` into `target` (atomically replaced)."""
    tmp = "%s.tmp.%d" % (target, os.getpid())
    cxx = os.environ.get("CXX", "g++")
    soname = os.path.basename(target)
    cmd = ([cxx] + CXXFLAGS + sources + ["-o", tmp,
                                          "-Wl,-soname," + soname]
           + LDFLAGS + extra)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise RuntimeError("building %s failed:\n%s\n%s"
                               % (soname, " ".join(cmd), proc.stdout))
        if proc.stdout:  # warnings: the sources are meant to be clean
            sys.stderr.write(proc.stdout)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build() -> Dict[str, str]:
    """Builds what is out of date; returns the absolute paths of the
    libraries as ``{"nccl": ..., "cudart": ...}``."""
    os.makedirs(BUILD_DIR, exist_ok=True)
    cudart = os.path.join(BUILD_DIR, "libfakecudart.so")
    nccl = os.path.join(BUILD_DIR, "libfakenccl.so")
    abi = [os.path.join(ABI_DIR, "gpu", "gpu_abi.h"), os.path.abspath(__file__)]
    with open(os.path.join(BUILD_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            sources = _paths(_CUDART_SOURCES)
            if _stale(cudart, sources + _paths(_CUDART_HEADERS) + abi):
                _link(cudart, sources, [])
            sources = _paths(_NCCL_SOURCES)
            if _stale(nccl, sources + _paths(_NCCL_HEADERS) + abi):
                _link(nccl, sources,
                      ["-L", BUILD_DIR, "-lfakecudart",
                       "-Wl,-rpath,$ORIGIN"])
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {"nccl": nccl, "cudart": cudart}


if __name__ == "__main__":
    libs = build()
    print(libs["nccl"])
    print(libs["cudart"])
