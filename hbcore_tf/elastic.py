"""``hvd.elastic`` (Horovod's elastic training) is not supported.

hbcore runs a fixed set of ranks for the life of a job: there is no
rendezvous that admits or drops workers, so ``hvd.elastic.run``, the
``TensorFlowState`` / ``TensorFlowKerasState`` / ``KerasState`` objects
and the elastic Keras callbacks have nothing to drive. Importing this
module (``hbcore_tf.elastic``, ``hbcore_tf.keras.elastic``, or reading
``hvd.elastic``) raises the ImportError below; ``hbrun``'s elastic flags
are refused the same way.
"""

MESSAGE = (
    "hvd.elastic is not supported by hbcore: elastic training (hvd.elastic."
    "run, TensorFlowKerasState / KerasState, the elastic callbacks, hbrun "
    "--min-np/--max-np/--host-discovery-script) needs ranks that join and "
    "leave a running job, and hbcore runs a fixed set of ranks. Launch with "
    "`hbrun -np N`; to change N, save a checkpoint on rank 0 and restart, "
    "restoring it there and broadcasting it "
    "(BroadcastGlobalVariablesCallback(0) or hvd.broadcast_variables).")

raise ImportError(MESSAGE)
