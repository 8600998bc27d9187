"""hbcore_tf.data: input pipelines for distributed training (HybridBackend's
``hb.data``).

Data sync (ranks with different numbers of batches):
    ds = hb.data.synchronized(ds, drop_remainder=None)      # TF2, model.fit
    it = hb.data.make_one_shot_iterator(ds)                  # v1 graphs
    with hb.data.step_weight(batch): ...                     # custom loops
"""
from hbcore_tf.data.iterators import (SyncIterator, make_initializable_iterator,
                                      make_iterator, make_one_shot_iterator)
from hbcore_tf.data.sync import batch_weight, step_weight, synchronized

__all__ = ["SyncIterator", "batch_weight", "make_initializable_iterator",
           "make_iterator", "make_one_shot_iterator", "step_weight",
           "synchronized"]
