"""XLA refusal: hbcore's ops have no XLA kernel, so building one while a
function is traced for XLA (``tf.function(jit_compile=True)``) fails with a
clear error at trace time rather than TensorFlow's when the function runs.
Used by the collectives, the gradient reduction and SyncBatchNormalization.
"""
import tensorflow as tf

from hbcore_tf._patches import internals


def in_xla_context() -> bool:
    """Returns whether ops being built now go to XLA (jit_compile=True),
    where hbcore's custom ops have no kernel."""
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(internals.XLA_CONTEXT.load()(graph))


def check_not_xla(what: str) -> None:
    """Raises a clear error when called while tracing for XLA.

    Raises:
        ValueError: the current function is compiled with XLA.
    """
    if in_xla_context():
        raise ValueError(
            "%s cannot run inside an XLA-compiled function: hbcore's "
            "collectives have no XLA kernel. Use tf.function(jit_compile="
            "False), or compile the Keras model with jit_compile=False (a "
            "Keras 3 model whose optimizer is hbcore's DistributedOptimizer "
            "does so by itself)." % what)
