"""The tf.data service (Horovod's): input pipelines that run in a
separate compute job and are read by the training job (docs/data_service.md).

Modules:
    client  the training side: TfDataServiceConfig, tf_data_service,
            send_to_data_service, the compute job's client and watchdog
    worker  the compute job's ranks: tf.data workers and dispatchers
    rpc     the small service through which the two jobs meet, over
            hbcore's authenticated wire

Public under Horovod's names: hbcore_tf.data.compute_service (client) and
``python -m hbcore_tf.data.compute_worker`` (worker); on Spark,
hbcore_tf/spark/compute_worker.py.
"""
