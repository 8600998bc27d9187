"""Every change hbcore makes to TensorFlow's and Keras' own code.

One module per patched target; each says what it patches, why, when it is
installed and undone, and the TensorFlow / Keras versions it was checked
on. ``internals`` is the one list of private TF/Keras names hbcore uses
(``tensorflow.python``, ``keras.src``, ``tf_keras.src``), patch targets
included; ``python -m hbcore_tf._patches.check`` verifies that each still
exists with the expected signature (CI runs it on TF 2.16 and 2.21).

Rules:

- Importing this package, or ``hbcore_tf``, patches nothing: a patch is
  installed by the layer that needs it, at the first moment it is needed
  (written beside each install call), so a Horovod user who never builds
  a sharded table runs stock TensorFlow.
- Patches hold no hbcore behaviour: the caller passes the callables a
  patch installs (dependency injection), and the modules here import
  nothing from hbcore_tf but each other. They can therefore be used from
  every layer, the op layer included.
- Each target is replaced through ``patch.Patch``, which keeps the
  original, so ``uninstall`` restores the very object TF defined.
"""
