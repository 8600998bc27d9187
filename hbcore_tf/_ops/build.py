"""Builds the TensorFlow op library against the TensorFlow installed now.

The library is compiled at the first import of hbcore_tf (a few seconds),
cached per TensorFlow version and source hash, and reused afterwards, so
installing or upgrading TensorFlow after hbcore needs no reinstall. When
many ranks import at once, a file lock lets one of them compile while the
others wait for it; the library is moved into place atomically.

Cache location: hbcore.user_cache.cache_dir("HB_TF_OPS_CACHE"):
$HB_TF_OPS_CACHE, else $XDG_CACHE_HOME/hbcore, else ~/.cache/hbcore where
that is writable, else a private directory under $TMPDIR (a non-root user
with a read-only home, as in Kubernetes pods).

hbcore and TensorFlow are imported inside the functions that need them:
``hbrun --check-build`` (hbcore.tf_probe) loads this file on its own to
find the cached library, and must import neither.
"""
import fcntl
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from typing import List, Optional, Tuple

_LIB_NAME = "hbcore_tf_ops.so"


# This file is hbcore_tf/_ops/build.py: the package is one folder up, the
# checkout two.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _repo_root() -> str:
    return os.path.dirname(_PACKAGE_DIR)


def _sources() -> Tuple[List[str], str]:
    """Returns (op sources, include dir with hbcore/c_api.h).

    An installed package carries copies (hbcore_tf/_csrc, hbcore/include);
    a source checkout uses csrc/ directly.
    """
    import hbcore

    installed = os.path.join(_PACKAGE_DIR, "_csrc")
    if os.path.exists(os.path.join(installed, "hbcore_ops.cc")):
        return (_files(installed, ".cc"),
                os.path.join(hbcore.__path__[0], "include"))
    root = _repo_root()
    return (_files(os.path.join(root, "csrc", "tf"), ".cc"),
            os.path.join(root, "csrc", "core", "include"))


def _files(directory: str, suffix: str) -> List[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.endswith(suffix))


def _tf_flags() -> Tuple[List[str], List[str], str]:
    import tensorflow as tf

    # TF's headers are not ours to keep warning-free: -isystem.
    compile_flags = ["-isystem" + f[2:] if f.startswith("-I") else f
                     for f in tf.sysconfig.get_compile_flags()]
    return compile_flags, list(tf.sysconfig.get_link_flags()), tf.__version__


def _cache_dir() -> str:
    from hbcore.user_cache import cache_dir

    return cache_dir("HB_TF_OPS_CACHE")


def _key(sources: List[str], include: str, flags: List[str],
         tf_version: str) -> str:
    digest = hashlib.sha256()
    headers = (_files(os.path.dirname(sources[0]), ".h")
               + _files(os.path.join(include, "hbcore"), ".h"))
    for path in sources + headers:
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(" ".join(flags).encode())
    digest.update(sys.version.encode())
    return "tf%s-%s" % (tf_version, digest.hexdigest()[:16])


def cached_library_path() -> Optional[str]:
    """The library for the installed TensorFlow if already compiled, else
    None. Compiles nothing (used by hbrun --check-build)."""
    sources, include = _sources()
    compile_flags, link_flags, version = _tf_flags()
    path = os.path.join(_cache_dir(), _key(sources, include,
                                           compile_flags + link_flags, version),
                        _LIB_NAME)
    return path if os.path.exists(path) else None


def _compile(sources: List[str], include: str, compile_flags: List[str],
             link_flags: List[str], out: str) -> None:
    import hbcore

    core_dir = hbcore.__path__[0]
    cxx = shlex.split(os.environ.get("CXX", "g++"))
    cmd = (cxx + ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra"]
           + compile_flags + ["-I", include] + sources + ["-o", out]
           + link_flags + ["-L", core_dir, "-lhbcore",
                           "-Wl,-rpath," + core_dir])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImportError(
            "hbcore_tf: compiling the TensorFlow op library failed "
            "(command: %s):\n%s" % (" ".join(cmd), proc.stderr[-4000:]))


def op_library_path() -> str:
    """Returns the op library for the installed TensorFlow, compiling it
    first if needed.

    Raises:
        ImportError: the compiler is missing or compilation failed; the
            message carries the compiler's output.
    """
    sources, include = _sources()
    compile_flags, link_flags, version = _tf_flags()
    key = _key(sources, include, compile_flags + link_flags, version)
    directory = os.path.join(_cache_dir(), key)
    path = os.path.join(directory, _LIB_NAME)
    if os.path.exists(path):
        return path
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # others wait for the compiler
        if not os.path.exists(path):
            print("hbcore_tf: compiling the op library for TensorFlow %s "
                  "(once per TensorFlow version) ..." % version,
                  file=sys.stderr, flush=True)
            fd, tmp = tempfile.mkstemp(dir=directory, suffix=".so")
            os.close(fd)
            try:
                _compile(sources, include, compile_flags, link_flags, tmp)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return path
