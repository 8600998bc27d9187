"""The base layer of hbcore_tf (private): TF/Keras version differences,
the options object and the rank-local variable notion. Imports only the
ops layer; see docs/architecture.md, "hbcore_tf's layers"."""
