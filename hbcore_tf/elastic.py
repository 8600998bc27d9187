"""``hvd.elastic`` for TensorFlow (Horovod's elastic training): not yet.

hbrun's elastic driver and the framework-neutral state machinery exist
(hbcore/launcher/elastic_driver.py, hbcore/elastic/), but the TensorFlow
state objects (``TensorFlowState``, ``TensorFlowKerasState``,
``KerasState``) and the elastic Keras callbacks are not written yet.
Importing this module (``hbcore_tf.elastic``, ``hbcore_tf.keras.elastic``,
or reading ``hvd.elastic``) raises the ImportError below.
"""

MESSAGE = (
    "hvd.elastic is not supported by hbcore for TensorFlow yet: its state "
    "objects (TensorFlowKerasState, TensorFlowState, KerasState) and the "
    "elastic Keras callbacks are not written. hbrun's elastic flags "
    "(--min-np/--max-np/--host-discovery-script) and the numpy front end "
    "hbcore.elastic (run, ObjectState: keep the weights as numpy arrays) "
    "work; see docs/elastic.md. Or launch with `hbrun -np N` and restart "
    "from a checkpoint saved on rank 0, broadcasting it after the restore "
    "(BroadcastGlobalVariablesCallback(0) or hvd.broadcast_variables).")

raise ImportError(MESSAGE)
