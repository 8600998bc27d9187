"""The ops layer of hbcore_tf (private), the bottom one: the op library
(build, library), the collectives' Python wrappers and their gradients,
tensor naming and the XLA refusal. Its public faces are hbcore_tf.mpi_ops,
process_sets and compression. See docs/architecture.md ("hbcore_tf's
layers")."""
