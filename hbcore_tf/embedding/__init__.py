"""Sharded embedding tables (HybridBackend's embedding sharding).

Each table's rows are split over the ranks; lookups move ids to the rows'
owners and rows back with alltoall (hbcore_tf.embedding.exchange); the
table is one logical variable for gradients and checkpoints;
``dense_features`` builds TensorFlow feature columns over such tables. See
docs/embedding.md.
"""
from hbcore_tf.embedding.partition import RowPartition
from hbcore_tf.embedding.feature_columns import dense_features
from hbcore_tf.embedding.paiev import EmbeddingBackendPAIEV
from hbcore_tf._base.rank_local import ShardInfo, is_sharded, shard_info

__all__ = ["EmbeddingBackendPAIEV", "RowPartition", "ShardInfo", "dense_features", "is_sharded",
           "shard_info"]
