"""The data-parallel layer of hbcore_tf (private), above the base and the
patches: gradient reduction, distributed optimizers and tapes, the classes
behind hb.scope, hooks and step weights. Its public faces are
hbcore_tf.functions and sync_batch_norm. See docs/architecture.md
("hbcore_tf's layers")."""
