"""Horovod's ``horovod.tensorflow.data.compute_worker``: the tf.data
service's compute job (hbcore_tf/data/service/worker.py, where the docs
are)::

    hbrun -np 4 python -m hbcore_tf.data.compute_worker /tmp/compute.json
"""
import sys

from hbcore_tf.data.service.worker import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
