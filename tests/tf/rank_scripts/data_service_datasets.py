"""Training side of test_data_service_reads.py's shared-dataset checks:
several datasets sent with reuse_dataset=True to one shared dispatcher.

    python data_service_datasets.py CONFIG N STOP

Every rank sends, in this order, a training set ``range(N)`` (read for
two epochs), a validation set ``range(1000, 1000 + N // 2)`` (one pass),
and the training set built anew (one pass); each rank reports what it
read of each pass. STOP "1": rank 0 then stops the compute job; "0": it
keeps serving (a later training job reads from it).
"""
import sys

from train_common import report, tf  # noqa: F401

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.data.compute_service import (TfDataServiceConfig,  # noqa: E402
                                            tf_data_service)


def main() -> None:
    path, n, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    config = TfDataServiceConfig.read(path, wait_for_file_creation=True)

    def shared(ds):
        return ds.send_to_data_service(config, rank, size,
                                       reuse_dataset=True)

    with tf_data_service(config, rank):
        train = shared(tf.data.Dataset.range(n))
        passes = [[int(i) for i in train], [int(i) for i in train]]
        val = shared(tf.data.Dataset.range(1000, 1000 + n // 2))
        passes.append([int(i) for i in val])
        again = shared(tf.data.Dataset.range(n))
        passes.append([int(i) for i in again])
        hvd.barrier()
        if stop and rank == 0:
            config.compute_client().shutdown()
    everyone = hbcore.allgather_object(passes)
    report({"rank": rank, "size": size, "ok": True,
            "passes": [sorted(i for mine in everyone for i in mine[p])
                       for p in range(len(passes))]})
    hvd.shutdown()


if __name__ == "__main__":
    main()
