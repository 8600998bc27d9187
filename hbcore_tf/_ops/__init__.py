"""The ops layer of hbcore_tf (private): the op library and what its ops
need (build, tensor naming, gradients). Imports nothing above it; see
docs/architecture.md, "hbcore_tf's layers"."""
