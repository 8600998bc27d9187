"""Names of the Horovod surface that exist only for compatibility.

Horovod scripts and libraries probe the build (``hvd.gloo_built()``,
``hvd.ccl_built()``, ...) before choosing a code path. hbcore answers them
here, in one place; ``hbcore`` and ``hbcore_tf`` (and through it
``hbcore_tf.keras``) re-export them. What they answer is fixed by hbcore's
design: MPI is always the control plane, there is no Gloo, oneCCL, IBM DDL
or ROCm support, and CUDA buffers are served only where NCCL is built.
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
    """Returns whether GPU buffers can be served (through NCCL)."""
    from hbcore.basics import nccl_built

    return nccl_built()


__all__ = ["ccl_built", "cuda_built", "ddl_built", "gloo_built",
           "gloo_enabled", "mpi_built", "mpi_enabled", "rocm_built"]
