"""hbcore: a Horovod-style distributed training runtime.

    import hbcore as hb
    hb.init()
    y = hb.allreduce(x, op=hb.Sum, name="x")

Collectives take numpy arrays (and CPU or CUDA tensors of other frameworks
through DLPack) and follow horovod.torch's names and semantics; see
hbcore.ops. Launch jobs with ``hbrun -np N python script.py``
or ``hbcore.run(fn, np=N)``.

Importing the package is cheap: the native core (and MPI) load on first use
of a name that needs them, so ``hbrun`` and ``hbrun --check-build`` start
fast and still work when the core cannot load.
"""
import importlib
from typing import Any, Dict, List

__version__ = "0.1.0"

# Public name -> submodule that defines it.
_EXPORTS: Dict[str, str] = {}
for _module, _names in {
    "hbcore.basics": (
        "init check_config shutdown is_initialized rank size local_rank "
        "local_size cross_rank cross_size mpi_threads_supported nccl_built "
        "build_info start_timeline stop_timeline is_homogeneous"),
    "hbcore._compat_names": (
        "mpi_built mpi_enabled gloo_built gloo_enabled ccl_built ddl_built "
        "rocm_built cuda_built"),
    "hbcore.ops": (
        "ReduceOp Average Sum Adasum Min Max Product Handle synchronize poll "
        "allreduce allreduce_async allreduce_ allreduce_async_ "
        "grouped_allreduce grouped_allreduce_async grouped_allreduce_ "
        "grouped_allreduce_async_ allgather allgather_async grouped_allgather "
        "broadcast broadcast_async broadcast_ broadcast_async_ alltoall "
        "alltoall_async reducescatter reducescatter_async "
        "grouped_reducescatter barrier join"),
    "hbcore._dlpack": "GpuArray",
    "hbcore.gpu_probe": "gpu_info",
    "hbcore.objects": "broadcast_object allgather_object",
    "hbcore.process_sets": (
        "ProcessSet global_process_set add_process_set remove_process_set"),
    "hbcore.exceptions": (
        "HbcoreError HorovodInternalError InvalidArgumentError MismatchError "
        "NotInitializedError ShutdownError ConfigError WaitTimeoutError "
        "UnsupportedError WorldMismatchError HostsUpdatedInterrupt"),
    "hbcore.launcher.run_fn": "run",
}.items():
    for _name in _names.split():
        _EXPORTS[_name] = _module

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "elastic":  # Horovod's hvd.elastic, a subpackage loaded on use
        return importlib.import_module("hbcore.elastic")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module 'hbcore' has no attribute %r" % name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
