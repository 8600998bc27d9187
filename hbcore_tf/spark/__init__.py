"""``hbcore_tf.spark``: TensorFlow jobs on Spark (Horovod's
``horovod.spark.tensorflow``): the tf.data service compute job
(compute_worker.py)."""
