"""Whether this process can serve GPU buffers, and with what.

The answers behind :func:`hbcore.nccl_built`, :func:`hbcore.cuda_built`,
:func:`hbcore.gpu_info`, :func:`hbcore.build_info` and ``hbrun
--check-build``. After ``init()`` the probes report what the running
runtime loaded (``hb_nccl_built``). Before it, the core loads NCCL and the
CUDA runtime the way init would (``hb_probe_gpu``, with the paths
hbcore._gpu_libs finds) and unloads both again; only gpu_info() also asks
the CUDA runtime for its device count (which initialises the CUDA driver).
Answers are cached per library choice.
"""
import os
import threading
from typing import Dict, Tuple

from hbcore import _gpu_libs

_cache: Dict[Tuple[object, ...], Tuple[bool, Dict[str, str]]] = {}
_cache_lock = threading.Lock()


def _probe(count_devices: bool = False) -> Tuple[bool, Dict[str, str]]:
    """(both libraries loaded, the probe's key/values plus each library's
    ``*_source``), cached per choice of library (overrides, variables).
    Only ``count_devices`` initialises the CUDA driver (a fork()ed child
    cannot use CUDA after that), so the yes/no probes do not count."""
    from hbcore._native import core

    found = {lib: _gpu_libs.resolve(lib) for lib in _gpu_libs.LIBRARIES}
    nccl = found[_gpu_libs.NCCL].override or ""
    cuda = found[_gpu_libs.CUDA_RUNTIME].override or ""
    # Without an override the core reads the variables: they are part of
    # the question.
    key = (nccl, cuda, count_devices) + tuple(
        os.environ.get(name, "") for lib in _gpu_libs.LIBRARIES
        for name in (lib.env, "HOROVOD_" + lib.env[3:]))
    with _cache_lock:
        if key not in _cache:
            ok, text = core.probe_gpu(nccl, cuda, count_devices)
            info = {}
            for line in text.splitlines():
                name, sep, value = line.partition("=")
                if sep:
                    info[name] = value
            if not ok and "error" not in info:
                info["error"] = "the GPU probe gave no reason"
            info["nccl_source"] = found[_gpu_libs.NCCL].source
            info["cuda_runtime_source"] = found[_gpu_libs.CUDA_RUNTIME].source
            _cache[key] = (bool(ok), info)
        ok, info = _cache[key]
    return ok, dict(info)


def gpu_info() -> Dict[str, str]:
    """Describes the GPU libraries this process would load (or loaded).

    Loads NCCL and the CUDA runtime as ``init()`` does (explicit setting,
    then the pip wheels, then the default sonames; see hbcore._gpu_libs)
    and unloads them again.

    Returns:
        When both load: ``nccl_library`` and ``cuda_runtime_library``
        (paths), ``nccl_version`` (e.g. ``"2.23.4"``),
        ``cuda_runtime_version`` (e.g. ``"12.4"``), ``cuda_devices`` (a
        count, ``"0"`` on a machine without GPUs). Otherwise ``error``:
        why not, naming the library, the path tried and what to install or
        set. Always ``nccl_source`` and ``cuda_runtime_source``: where each
        library is taken from (``"from the nvidia-nccl-cu12 wheel"``,
        ``"set by HB_NCCL_LIBRARY=..."``, ``"default soname ..."``).

    Raises:
        ImportError: the native core cannot be loaded.
    """
    return _probe(count_devices=True)[1]


def nccl_available() -> bool:
    """True when GPU buffers can be served: after init, whether the runtime
    loaded NCCL and the CUDA runtime; before, whether both would load."""
    from hbcore._native import core

    if core.is_initialized():
        return bool(core.nccl_built())
    return _probe()[0]


def cuda_runtime_available() -> bool:
    """True when the CUDA runtime can be loaded: after init, whether the
    runtime loaded GPU support; before, whether the library would load
    (even if NCCL would not)."""
    from hbcore._native import core

    if core.is_initialized():
        return bool(core.nccl_built())
    ok, info = _probe()
    if ok:
        return True
    # The core loads the CUDA runtime first and NCCL second: an error about
    # NCCL means the CUDA runtime loaded.
    error = info.get("error", "")
    return (error.startswith("cannot load the NCCL library") or
            "has no entry point nccl" in error)
