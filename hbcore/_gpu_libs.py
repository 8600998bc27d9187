"""Where hbcore finds NCCL and the CUDA runtime for GPU collectives.

The core loads both libraries with dlopen at init (never linked), so hbcore
installs and runs on machines without CUDA. This module only decides which
files to name; it imports nothing heavy (no CUDA, no nvidia package code)
and works without the native core.

Search order, for each library separately:

1. An explicit setting: ``hbcore.init(config={"nccl_library": path})`` (or
   ``"cuda_runtime_library"``), else the ``HB_NCCL_LIBRARY`` /
   ``HB_CUDA_RUNTIME_LIBRARY`` variable, else its ``HOROVOD_NCCL_LIBRARY``
   / ``HOROVOD_CUDA_RUNTIME_LIBRARY`` alias (the core reads every knob's
   ``HOROVOD_`` alias). The core reads these itself; hbcore passes nothing.
2. The pip wheel: ``nvidia/nccl/lib/libnccl.so.2`` of ``nvidia-nccl-cu12``
   and ``nvidia/cuda_runtime/lib/libcudart.so.12`` of
   ``nvidia-cuda-runtime-cu12`` (``pip install 'hbcore[gpu]'``), located
   through the distribution's file list (importlib.metadata), else in the
   ``nvidia`` namespace package on ``sys.path`` (installs without
   metadata, e.g. ``pip install --target``). hbcore passes the path found
   to the core as a configuration override.
3. The default soname (``libnccl.so.2``, ``libcudart.so.12``), resolved by
   the dynamic linker (LD_LIBRARY_PATH, ld.so.cache): the core's default
   when hbcore passes nothing.
"""
import os
import sys
from typing import (Any, Dict, Iterable, Mapping, NamedTuple, Optional,
                    Sequence)


class GpuLibrary(NamedTuple):
    """One library the GPU backend loads.

    Attributes:
        knob: its configuration knob (``hbcore.knobs``).
        env: the knob's variable (``HOROVOD_`` + ``env[3:]`` is the alias).
        soname: the name the dynamic linker resolves by default.
        distribution: the pip distribution that ships it.
        wheel_path: where that wheel puts it, relative to site-packages.
    """

    knob: str
    env: str
    soname: str
    distribution: str
    wheel_path: str


NCCL = GpuLibrary("nccl_library", "HB_NCCL_LIBRARY", "libnccl.so.2",
                  "nvidia-nccl-cu12", "nvidia/nccl/lib/libnccl.so.2")
CUDA_RUNTIME = GpuLibrary(
    "cuda_runtime_library", "HB_CUDA_RUNTIME_LIBRARY", "libcudart.so.12",
    "nvidia-cuda-runtime-cu12", "nvidia/cuda_runtime/lib/libcudart.so.12")
LIBRARIES = (NCCL, CUDA_RUNTIME)


def explicit_setting(library: GpuLibrary,
                     config: Optional[Mapping[str, str]] = None,
                     environ: Optional[Mapping[str, str]] = None
                     ) -> Optional[str]:
    """The user's own choice for ``library``, as the core would read it.

    Args:
        library: NCCL or CUDA_RUNTIME.
        config: the knob overrides init passes to the core (name -> text).
        environ: the environment (default: os.environ).

    Returns:
        A description such as ``"HB_NCCL_LIBRARY=/opt/nccl/libnccl.so.2"``,
        or None when neither the overrides nor the variables set it (empty
        variables count as unset, as in the core).
    """
    environ = os.environ if environ is None else environ
    if config is not None and library.knob in config:
        return "config %s=%s" % (library.knob, config[library.knob])
    for name in (library.env, "HOROVOD_" + library.env[3:]):
        if environ.get(name):
            return "%s=%s" % (name, environ[name])
    return None


def find_in_wheel(library: GpuLibrary,
                  path: Optional[Sequence[str]] = None) -> Optional[str]:
    """The library file of ``library``'s pip wheel, if one is installed.

    Args:
        library: NCCL or CUDA_RUNTIME.
        path: directories to search (default: sys.path).

    Returns:
        The absolute path of the file, or None.
    """
    path = list(sys.path if path is None else path)
    # Every init asks (an elastic job's each generation too): without the
    # wheel's top directory (nvidia/) on the path neither search below can
    # find it, and importlib.metadata's import alone costs 0.1-0.3 s.
    top = library.wheel_path.split("/", 1)[0]
    if not any(os.path.isdir(os.path.join(entry or os.curdir, top))
               for entry in path):
        return None
    for dist in _distributions(library.distribution, path):
        try:
            candidate = os.path.abspath(str(dist.locate_file(
                library.wheel_path)))
        except Exception:  # a broken distribution must not stop the search
            continue
        if os.path.isfile(candidate):
            return candidate
    for entry in path:
        candidate = os.path.abspath(os.path.join(entry or os.curdir,
                                                 library.wheel_path))
        if os.path.isfile(candidate):
            return candidate
    return None


def _distributions(name: str, path: Sequence[str]) -> Iterable[Any]:
    """The importlib.metadata distributions named ``name`` on ``path``."""
    import importlib.metadata  # here: only a path with nvidia/ needs it

    try:
        return list(importlib.metadata.distributions(name=name, path=path))
    except Exception:  # unreadable metadata: fall back to the layout scan
        return []


class Resolution(NamedTuple):
    """Where one library will be loaded from.

    Attributes:
        library: the library.
        override: the path to pass as the knob's value, or None.
        source: a human-readable description of the choice.
    """

    library: GpuLibrary
    override: Optional[str]
    source: str


def resolve(library: GpuLibrary,
            config: Optional[Mapping[str, str]] = None,
            environ: Optional[Mapping[str, str]] = None,
            path: Optional[Sequence[str]] = None) -> Resolution:
    """Applies the search order (module docstring) to one library.

    Returns:
        The Resolution: ``override`` is the path hbcore passes to the core
        (None: the core applies the explicit setting or the soname), and
        ``source`` says where the library comes from, for reports.
    """
    setting = explicit_setting(library, config, environ)
    if setting is not None:
        return Resolution(library, None, "set by %s" % setting)
    found = find_in_wheel(library, path)
    if found is not None:
        return Resolution(library, found,
                          "from the %s wheel" % library.distribution)
    return Resolution(library, None,
                      "default soname %s (no %s wheel installed)"
                      % (library.soname, library.distribution))


def init_overrides(config: Optional[Mapping[str, str]] = None,
                   environ: Optional[Mapping[str, str]] = None,
                   path: Optional[Sequence[str]] = None) -> Dict[str, str]:
    """The knob overrides hbcore adds for init: the wheel's library path for
    each library the user did not set (config, HB_* or HOROVOD_*).

    Args:
        config: the overrides init passes already (name -> text).
        environ: the environment (default: os.environ).
        path: directories to search for wheels (default: sys.path).

    Returns:
        knob name -> library path; empty when no wheel applies.
    """
    out = {}
    for library in LIBRARIES:
        found = resolve(library, config, environ, path)
        if found.override is not None:
            out[library.knob] = found.override
    return out
