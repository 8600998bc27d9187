"""Names of the Horovod surface that exist only for compatibility.

Horovod scripts and libraries probe the build (``hvd.gloo_built()``,
``hvd.ccl_built()``, ...) before choosing a code path. hbcore answers them
here, in one place; ``hbcore`` and ``hbcore_tf`` (and through it
``hbcore_tf.keras``) re-export them. What they answer is fixed by hbcore's
design: MPI is always the control plane, there is no Gloo, oneCCL, IBM DDL
or ROCm support, and CUDA buffers are served only where NCCL and the CUDA
runtime load (hbcore.gpu_probe).
"""


def mpi_built() -> bool:
    """Returns True: hbcore is always built with MPI."""
    return True


def mpi_enabled() -> bool:
    """Returns True: MPI is hbcore's control plane."""
    return True


def gloo_built() -> bool:
    """Returns False: hbcore has no Gloo controller."""
    return False


def gloo_enabled() -> bool:
    """Returns False: hbcore has no Gloo controller."""
    return False


def ccl_built() -> bool:
    """Returns False: hbcore has no oneCCL support."""
    return False


def ddl_built() -> bool:
    """Returns False: hbcore has no IBM DDL support."""
    return False


def rocm_built() -> bool:
    """Returns False: hbcore has no ROCm support."""
    return False


def cuda_built() -> bool:
    """Returns whether the CUDA runtime can be loaded: after ``init()``,
    whether the runtime loaded GPU support; before, whether
    libcudart.so.12 would load (see :func:`hbcore.gpu_info`). GPU
    collectives also need NCCL: :func:`hbcore.nccl_built`."""
    from hbcore.gpu_probe import cuda_runtime_available

    return cuda_runtime_available()


__all__ = ["ccl_built", "cuda_built", "ddl_built", "gloo_built",
           "gloo_enabled", "mpi_built", "mpi_enabled", "rocm_built"]
