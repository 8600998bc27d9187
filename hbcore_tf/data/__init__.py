"""hbcore_tf.data: input pipelines for distributed training (HybridBackend's
``hb.data``).

Data sync (ranks with different numbers of batches):
    ds = hb.data.synchronized(ds, drop_remainder=None)      # TF2, model.fit
    it = hb.data.make_one_shot_iterator(ds)                  # v1 graphs
    with hb.data.step_weight(batch): ...                     # custom loops

Parquet input (pyarrow, the ``parquet`` extra):
    ds = hb.data.ParquetDataset(files, batch_size, fields=None,
                                partition_count=size, partition_index=rank)
    ds = ds.apply(hb.data.rebatch(batch_size))   # batches spanning files
    ds = ds.apply(hb.data.to_sparse())   # list columns (DataFrame.Value)
                                         # as tf.SparseTensor

Horovod's tf.data service integration is hbcore_tf.data.compute_service.
"""
from hbcore_tf.data.dataframe import (DataFrame, to_sparse,
                                      unbatch_and_to_sparse)
from hbcore_tf.data.iterators import (SyncIterator, make_initializable_iterator,
                                      make_iterator, make_one_shot_iterator)
from hbcore_tf.data.parquet import ParquetDataset, read_parquet
from hbcore_tf.data.rebatch import RebatchDataset, rebatch
from hbcore_tf.data.sync import batch_weight, step_weight, synchronized

__all__ = ["DataFrame", "ParquetDataset", "RebatchDataset", "SyncIterator", "batch_weight",
           "make_initializable_iterator", "make_iterator",
           "make_one_shot_iterator", "read_parquet", "rebatch", "step_weight",
           "synchronized", "to_sparse", "unbatch_and_to_sparse"]
