"""TensorFlow collectives over the hbcore runtime (horovod.tensorflow's
ops: same names, signatures, defaults and semantics as Horovod 0.28).

The public face of hbcore_tf's ops layer, at Horovod's module path
(horovod.tensorflow.mpi_ops). The wrappers live in hbcore_tf._ops.collectives;
importing this module also registers their gradients
(hbcore_tf._ops.collective_gradients).
"""
# Re-exported: horovod.tensorflow.mpi_ops offers these names too.
from hbcore import (Adasum, Average, Max, Min, NotInitializedError, Product,
                    ReduceOp, Sum, cross_rank, cross_size, is_initialized,
                    local_rank, local_size, mpi_threads_supported, nccl_built,
                    rank, shutdown, size, start_timeline, stop_timeline,
                    is_homogeneous)
# Build probes that exist only for Horovod compatibility: one module.
from hbcore._compat_names import (ccl_built, cuda_built, ddl_built,
                                  gloo_built, gloo_enabled, mpi_built,
                                  mpi_enabled, rocm_built)

from hbcore_tf._ops.collectives import (
    TensorLike, allgather, allreduce, alltoall, alltoall_int64_splits,
    barrier, broadcast, broadcast_, grouped_allgather, grouped_allreduce,
    grouped_reducescatter, init, join, local_rank_op, local_size_op,
    oob_allreduce, process_set_included_op, rank_op, reducescatter, size_op)
# Registers the gradients of the collectives with TensorFlow.
from hbcore_tf._ops import collective_gradients  # noqa: F401
from hbcore_tf.compression import Compression
from hbcore_tf.process_sets import (ProcessSet, add_process_set,
                                    global_process_set, remove_process_set)
