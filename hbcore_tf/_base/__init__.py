"""The base layer of hbcore_tf (private), above the ops: the TF/Keras
version differences (compat), the options object, ``hb.context`` and the
rank-local variable notion. See docs/architecture.md ("hbcore_tf's
layers")."""
