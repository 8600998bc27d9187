"""``hbrun --check-build``: what was built and found, in one screen.

Everything here is looked up lazily and each item fails on its own line
("not available: <reason>"), so the report works on a half-built install,
which is exactly when it is needed. TensorFlow is never imported into this
process (hbcore.tf_probe asks a child), so its start-up log lines do not
interleave with the report.
"""

import importlib.metadata
import importlib.util
import sys
from typing import Callable, List, Optional, TextIO, Tuple

from hbcore import _gpu_libs
from hbcore.launcher.mpiexec import find_mpiexec, mpiexec_version

# Distribution names TensorFlow is published under.
_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                     "tf-nightly", "tensorflow-macos", "intel-tensorflow")


def _guard(fn: Callable[[], str]) -> str:
    try:
        return fn()
    except Exception as exc:  # report, never crash: see module docstring
        return "not available: %s" % (str(exc).strip().splitlines() or
                                       [type(exc).__name__])[0]


def _hbcore_version() -> str:
    try:
        return importlib.metadata.version("hbcore")
    except importlib.metadata.PackageNotFoundError:
        import hbcore
        return "%s (from source tree %s)" % (
            getattr(hbcore, "__version__", "unknown"),
            list(getattr(hbcore, "__path__", [""]))[0])


def _launcher() -> str:
    path = find_mpiexec()
    return "%s (%s)" % (path, mpiexec_version(path))


def _build_info() -> Tuple[Optional[dict], str]:
    try:
        import hbcore
        return dict(hbcore.build_info()), ""
    except Exception as exc:
        return None, "not available: %s" % (str(exc).strip().splitlines() or
                                             [type(exc).__name__])[0]


def _tensorflow() -> str:
    if importlib.util.find_spec("tensorflow") is None:
        return "not installed"
    # The distribution metadata gives the version without paying the
    # seconds that "import tensorflow" takes.
    for name in _TF_DISTRIBUTIONS:
        try:
            return "%s (%s)" % (importlib.metadata.version(name), name)
        except importlib.metadata.PackageNotFoundError:
            continue
    # Never "import tensorflow" here: its start-up log would interleave
    # with the report. The probe asks a child process.
    from hbcore.tf_probe import probe

    info = probe()
    if info.get("tensorflow"):
        return str(info["tensorflow"])
    raise RuntimeError(info.get("error") or "version unknown")


def _gpu_lines(info: Optional[dict]) -> List[Tuple[str, str]]:
    """The GPU part of the report: what the core's probe loaded (paths,
    versions, devices) or why it failed, and where each library is taken
    from. Without a core to probe with, only where the libraries would be
    taken from."""
    gpu = info.get("gpu") if info is not None else None
    if not isinstance(gpu, dict):
        return [(label, _guard(lambda lib=lib: "%s; not probed (no core)"
                               % _gpu_libs.resolve(lib).source))
                for label, lib in (("NCCL library", _gpu_libs.NCCL),
                                   ("CUDA runtime", _gpu_libs.CUDA_RUNTIME))]
    if "error" in gpu:
        return [("GPU support", "not available: %s" % gpu["error"]),
                ("NCCL library", gpu.get("nccl_source", "")),
                ("CUDA runtime", gpu.get("cuda_runtime_source", ""))]
    return [("NCCL library", "%s (version %s; %s)" % (
                gpu.get("nccl_library"), gpu.get("nccl_version"),
                gpu.get("nccl_source"))),
            ("CUDA runtime", "%s (version %s; %s)" % (
                gpu.get("cuda_runtime_library"),
                gpu.get("cuda_runtime_version"),
                gpu.get("cuda_runtime_source"))),
            ("CUDA devices", str(gpu.get("cuda_devices")))]


def _info_value(info: dict, key: str) -> str:
    value = info[key]
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def report_lines() -> List[Tuple[str, str]]:
    """Collects the check-build report.

    Returns:
        (label, value) pairs in display order.
    """
    info, reason = _build_info()
    lines = [
        ("hbcore version", _guard(_hbcore_version)),
        ("Python", "%s (%s)" % (sys.version.split()[0], sys.executable)),
        ("MPI launcher", _guard(_launcher)),
    ]
    core = [("MPI library", "mpi_library_version"),
            ("MPI threads supported", "mpi_threads_supported"),
            ("core library", "core_library"),
            ("TF op library", "tf_op_library"),
            ("NCCL built", "nccl_built")]
    if info is None:
        # One line for the whole core rather than the same reason five times.
        lines.append(("core (build_info)", reason))
    else:
        lines += [(label, _info_value(info, key)) for label, key in core
                  if key in info]
        shown = {key for _, key in core} | {"version", "gpu"}
        lines += [(key, _info_value(info, key)) for key in sorted(info)
                  if key not in shown]
    lines.append(("TensorFlow", _guard(_tensorflow)))
    lines += _gpu_lines(info)
    return lines


def print_report(stream: Optional[TextIO] = None) -> int:
    """Prints the check-build report.

    Args:
        stream: Where to print (default: sys.stdout).

    Returns:
        0: the report is informational, even when parts are missing.
    """
    stream = stream or sys.stdout
    stream.write("hbcore build check\n")
    for label, value in report_lines():
        # MPI library version strings span several lines; keep one screen.
        first = (" ".join(value.strip().splitlines()[0].split())
                 if value.strip() else value)
        stream.write("  %-23s %s\n" % (label + ":", first))
    stream.flush()
    return 0
