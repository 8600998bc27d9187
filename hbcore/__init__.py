"""hbcore: a Horovod-style distributed training runtime.

    import hbcore as hb
    hb.init()
    y = hb.allreduce(x, op=hb.Sum, name="x")

Collectives take numpy arrays and follow horovod.torch's names and
semantics; see hbcore.ops. Launch jobs with ``hbrun -np N python script.py``
or ``hbcore.run(fn, np=N)``.
"""
from hbcore.basics import (build_info, cross_rank, cross_size, gloo_built,
                           gloo_enabled, init, is_initialized, local_rank,
                           local_size, mpi_built, mpi_enabled,
                           mpi_threads_supported, nccl_built, rank, shutdown,
                           size)
from hbcore.exceptions import (HbcoreError, HorovodInternalError,
                               InvalidArgumentError, MismatchError,
                               NotInitializedError, ShutdownError)
from hbcore.objects import allgather_object, broadcast_object
from hbcore.ops import (Adasum, Average, Handle, Max, Min, Product, ReduceOp,
                        Sum, allgather, allgather_async, allreduce,
                        allreduce_, allreduce_async, allreduce_async_,
                        alltoall, alltoall_async, barrier, broadcast,
                        broadcast_, broadcast_async, broadcast_async_,
                        grouped_allgather, grouped_allreduce,
                        grouped_allreduce_, grouped_allreduce_async,
                        grouped_allreduce_async_, grouped_reducescatter, join,
                        poll, reducescatter, reducescatter_async, synchronize)
from hbcore.run import run

__version__ = "0.1.0"
