"""The tf.data service compute job on Spark (Horovod's TF guide)::

    spark-submit --master "local[4]" \
        "$(python -c 'import hbcore_tf.spark.compute_worker as w; print(w.__file__)')" \
        /tmp/compute.json

The same job as ``hbrun -np N python -m hbcore_tf.data.compute_worker
/tmp/compute.json``, with the same flags (``--dispatchers``,
``--dispatcher-side``, ...), started in N = ``spark.default.parallelism``
Spark tasks through ``hbcore.spark.run``: every task's rank runs
hbcore_tf.data.compute_worker, rank 0 writes the config file, and the
training job reads it exactly as the hbrun-launched job's. The config
file's path must be one the training job sees (rank 0 writes it where its
task runs). The job ends, and spark-submit exits 0, when the training job
calls ``compute_client().shutdown()``; a failing rank ends it with that
rank's error.
"""

import os
import sys
from typing import List, Optional

if not __package__:
    # Run by path (spark-submit): this directory must not shadow anything,
    # and the ranks get the driver's sys.path.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path
                   if os.path.abspath(p or os.curdir) != _HERE]

from pyspark.sql import SparkSession  # noqa: E402

import hbcore.spark  # noqa: E402
from hbcore_tf.data.service import worker as compute_worker  # noqa: E402


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the compute job on the active (or a new) Spark session.

    Args:
        argv: hbcore_tf.data.compute_worker's arguments (default:
            sys.argv[1:]).

    Returns:
        0, or the highest exit status of the ranks (2 when their number is
        not a multiple of ``--dispatchers``).

    Raises:
        SystemExit: bad arguments or ``--help``, before Spark starts.
        RuntimeError: a rank raised (hbcore.spark.run's error).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    compute_worker.parse_args(argv)  # bad flags fail here, not on N ranks
    spark = SparkSession.builder.appName("hbcore compute job").getOrCreate()
    try:
        codes = hbcore.spark.run(
            compute_worker.main, args=(argv,),
            num_proc=spark.sparkContext.defaultParallelism,
            stdout=sys.stdout, stderr=sys.stderr)
    finally:
        spark.stop()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
