"""The data-parallel layer of hbcore_tf (private): gradient reduction,
distributed optimizers and tapes, hooks and step weights. Imports only the
layers below it (ops, base, patches); see docs/architecture.md,
"hbcore_tf's layers"."""
