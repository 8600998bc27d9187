"""Rank script: a tiny hbcore_tf job for tests/test_mpi_operator.py.

Importing hbcore_tf finds (or compiles) the TensorFlow op library in
hbcore's cache directory: the step that needs a writable place when the
job runs as a user whose home is read-only.  Each rank reports the Sum
allreduce of a vector filled with rank + 1, the world's shape (size,
local_size, cross_size: which hosts the launcher used), its uid and the
op library's path.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import report  # noqa: E402

import tensorflow as tf  # noqa: E402

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._ops import build  # noqa: E402

hvd.init()
total = hvd.allreduce(tf.fill([3], float(hvd.rank() + 1)), op=hvd.Sum)
report({"sum": total.numpy().tolist(), "size": hvd.size(),
        "local_size": hvd.local_size(), "cross_size": hvd.cross_size(),
        "uid": os.getuid(), "library": build.op_library_path()}, hvd.rank())
hvd.shutdown()
