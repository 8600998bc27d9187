"""Training side of the round_robin checks of test_data_service_reads.py: a
compute job with two workers on one dispatcher, read by every rank.

    python data_service_round_robin.py CONFIG MODE N TAKE

MODE "shared": ``range(N).repeat()`` with reuse_dataset=True and
round_robin=True; every rank takes TAKE elements (TAKE * size < N, so
less than one pass is read in all) and reports them: each element is
produced once per pass (distributed_epoch), so no element may reach the
ranks twice. MODE "own": ``range(N)`` (finite) with round_robin=True but
reuse_dataset=False: as in Horovod, round_robin only applies to a shared
job, so each rank reads a job of its own and gets all N elements. Rank 0
stops the compute job at the end.
"""
import sys

from train_common import report, tf  # noqa: F401

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.data.compute_service import (TfDataServiceConfig,  # noqa: E402
                                            tf_data_service)


def main() -> None:
    path, mode, n, take = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(
        sys.argv[4])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    config = TfDataServiceConfig.read(path, wait_for_file_creation=True)
    with tf_data_service(config, rank):
        if mode == "shared":
            ds = tf.data.Dataset.range(n).repeat().send_to_data_service(
                config, rank, size, reuse_dataset=True, round_robin=True)
            mine = [int(i) for i in ds.take(take)]
        else:
            ds = tf.data.Dataset.range(n).send_to_data_service(
                config, rank, size, reuse_dataset=False, round_robin=True)
            mine = [int(i) for i in ds]
        hvd.barrier()
        if rank == 0:
            config.compute_client().shutdown()
    everyone = hbcore.allgather_object(mine)
    report({"rank": rank, "size": size, "ok": True, "per_rank": everyone})
    hvd.shutdown()


if __name__ == "__main__":
    main()
