"""hbcore_tf.data: input pipelines for distributed training (HybridBackend's
``hb.data``)."""
from hbcore_tf.data.dataframe import DataFrame, to_sparse
from hbcore_tf.data.parquet import ParquetDataset, read_parquet
