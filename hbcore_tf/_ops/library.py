"""The op library (csrc/tf): built or found by hbcore_tf._ops.build, loaded
once. Its ops are wrapped by hbcore_tf._ops.collectives and the embedding
lookup's routing (hbcore_tf.embedding.exchange)."""
# hbcore first: it loads libmpi and libhbcore, which the op library links to.
import hbcore  # noqa: F401
import tensorflow as tf

from hbcore_tf._ops import build

lib = tf.load_op_library(build.op_library_path())


def _run_collectives_unordered() -> None:
    """Lets independent collectives inside one tf.function run concurrently.

    The ops are stateful (so grappler never folds, merges or prunes them),
    and tf.function's automatic control dependencies chain all stateful ops
    in program order. Chained, 50 allreduces in one function would reach
    the core one after another (50 negotiations, no fusion) and two
    functions issuing collectives in different orders could deadlock.
    TensorFlow's list of "must run, order insensitive" stateful ops gives
    exactly the wanted semantics: always executed, not ordered (data
    dependencies still order them). The list is private; without it the
    ops stay correct, only serialized.
    """
    try:
        from tensorflow.python.framework import auto_control_deps as acd
    except ImportError:  # pragma: no cover - other TF layouts
        return
    current = getattr(acd, "MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS", None)
    if current is not None:
        acd.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = frozenset(current) | {
            "HbcoreCollective", "HbcoreAlltoall"}


_run_collectives_unordered()
