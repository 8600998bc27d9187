"""Training side of the tf.data service checks: reads two epochs of a
finite dataset through the compute job and reports which elements it got
in each epoch and which process ran the map function (the pid read from
/proc/self/stat by a TF op inside the map, so it is the pid of the
process that executed it). Rank 0 then stops the compute job.

    python data_service_check.py CONFIG MODE N
    MODE: "shared" (one dispatcher, reuse_dataset=True: one job read by
    every rank), "sharded" (each rank reads its .shard(size, rank)) or
    "round_robin" (one shared job of the repeated dataset read with
    round_robin=True: every rank reads N elements, one pass).
"""
import os
import sys

from train_common import report, tf  # noqa: F401

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.data.compute_service import (TfDataServiceConfig,  # noqa: E402
                                            tf_data_service)


EPOCHS = 2


def pid_of_executing_process(_):
    stat = tf.io.read_file("/proc/self/stat")
    return tf.strings.to_number(tf.strings.split(stat, " ")[0], tf.int64)


def main() -> None:
    path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Horovod's default wait (60 s) is short for a compute job started at
    # the same moment by spark-submit (a JVM, then two ranks importing TF)
    # on a loaded 2-core machine; the harness's own limit is 180 s.
    config = TfDataServiceConfig.read(path, wait_for_file_creation=True,
                                      timeout=150)
    with tf_data_service(config, rank):
        ds = tf.data.Dataset.range(n)
        if mode == "sharded":
            ds = ds.shard(size, rank)
        if mode == "round_robin":   # coordinated reads need an infinite one
            ds = ds.repeat()
        ds = ds.map(lambda i: (i, pid_of_executing_process(i)))
        ds = ds.send_to_data_service(config, rank, size,
                                     reuse_dataset=(mode != "sharded"),
                                     round_robin=(mode == "round_robin"))
        if mode == "round_robin":
            epochs = [[(int(i), int(p)) for i, p in ds.take(n)]]
        else:
            epochs = [[(int(i), int(p)) for i, p in ds]
                      for _ in range(EPOCHS)]
        hvd.barrier()
        if rank == 0:
            config.compute_client().shutdown()
    everyone = hbcore.allgather_object(epochs)
    trainers = hbcore.allgather_object(os.getpid())
    report({"rank": rank, "size": size, "ok": True,
            "elements": [sorted(i for mine in everyone for i, _ in mine[e])
                         for e in range(len(epochs))],
            "per_rank": [[len(part) for part in mine] for mine in everyone],
            "map_pids": sorted({p for mine in everyone for part in mine
                                for _, p in part}),
            "trainer_pids": trainers})
    hvd.shutdown()


if __name__ == "__main__":
    main()
