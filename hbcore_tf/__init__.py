"""hbcore_tf: the horovod.tensorflow API on current TensorFlow.

    import hbcore_tf as hvd
    hvd.init()
    y = hvd.allreduce(x)                     # Average over all ranks
    opt = hvd.DistributedOptimizer(opt)
    hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    bn = hvd.SyncBatchNormalization()       # statistics of the global batch

HybridBackend's API sits beside it (``import hbcore_tf as hb``;
docs/hybridbackend.md): ``hb.context`` / ``hb.Context``, ``hb.scope``,
``@hb.function``, ``hb.wraps``, ``hb.train``, ``hb.saved_model``,
``hb.feature_column`` and ``hb.layers`` (``DenseFeatures``); the
options live in ``hb.context.options`` (hbcore_tf._base.options);
``hb.estimator`` holds only ``ModeKeys`` (tf.estimator left TensorFlow 2.16;
its other names raise ImportError).

Names, signatures, defaults and semantics follow horovod.tensorflow 0.28.
The ops run on the hbcore core (one per process, shared with the numpy API
``hbcore``); the op library is compiled for the installed TensorFlow at
the first import (see hbcore_tf._ops.build).
"""
from hbcore_tf.compression import Compression, Compressor
from hbcore_tf.functions import (allgather_object, broadcast_global_variables,
                                 broadcast_object, broadcast_object_fn,
                                 broadcast_variables)
from hbcore_tf._parallel.hooks import BroadcastGlobalVariablesHook
from hbcore_tf.mpi_ops import (Adasum, Average, Max, Min, Product, ReduceOp,
                               Sum, allgather, allreduce, alltoall, barrier,
                               broadcast, broadcast_, ccl_built, cross_rank,
                               cross_size, cuda_built, ddl_built, gloo_built,
                               gloo_enabled, grouped_allgather,
                               grouped_allreduce, grouped_reducescatter, init,
                               is_initialized, join, local_rank,
                               local_rank_op, local_size, local_size_op,
                               mpi_built, mpi_enabled, mpi_threads_supported,
                               nccl_built, oob_allreduce,
                               process_set_included_op, rank, rank_op,
                               reducescatter, rocm_built, shutdown, size,
                               size_op, start_timeline, stop_timeline,
                               is_homogeneous)
from hbcore_tf.process_sets import (ProcessSet, add_process_set,
                                    global_process_set, remove_process_set)
# The training layer (written alongside this file) builds on the above.
from hbcore_tf._parallel.gradient_tape import (
    DistributedGradientTape, PartialDistributedGradientTape)
from hbcore_tf._parallel.distributed_optimizer import DistributedOptimizer
# HybridBackend's names.
from hbcore_tf._base.context import Context, context, context_scope
from hbcore_tf.scope import embedding_scope, function, scope, wraps
from hbcore_tf.embedding import dense_features
# DeepRec's embedding-variable options (hb.keras.layers.DynamicEmbedding).
from hbcore_tf.embedding.ev_option import (CounterFilter,
                                           EmbeddingVariableOption,
                                           GlobalStepEvict, L2WeightEvict)
# DeepRec's EmbeddingVariable over a dynamic table (tf.compat.v1 graphs).
from hbcore_tf.embedding.paiev import get_embedding_variable
from hbcore_tf import (data, feature_column, layers, metrics, saved_model,
                       train, util)
from hbcore_tf.util import _executing_eagerly

from hbcore import __version__


def __getattr__(name: str):
    # SyncBatchNormalization subclasses the BatchNormalization of the Keras
    # in use; it is built (and registered for serialization) on first
    # access, so importing hbcore_tf never imports tf_keras by itself.
    if name == "SyncBatchNormalization":
        from hbcore_tf import sync_batch_norm

        return sync_batch_norm.layer_class()
    if name == "keras":
        # hb.keras (hb.keras.metrics, and Horovod's hbcore_tf.keras API)
        # imports Keras: only on first use.
        import hbcore_tf.keras

        return hbcore_tf.keras
    if name == "estimator":
        # Only ModeKeys: tf.estimator was removed in TensorFlow 2.16, so its
        # other names raise ImportError (hbcore_tf/estimator.py).
        import hbcore_tf.estimator

        return hbcore_tf.estimator
    if name == "elastic":
        # Loaded on use, as Horovod's hvd.elastic (it imports hbcore.elastic).
        import hbcore_tf.elastic
        return hbcore_tf.elastic
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
