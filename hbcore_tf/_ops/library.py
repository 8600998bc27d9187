"""The op library (csrc/tf): built or found by hbcore_tf._ops.build, loaded
once. Its ops are wrapped by hbcore_tf._ops.collectives and the embedding
lookup's routing (hbcore_tf.embedding.exchange)."""
# hbcore first: it loads libmpi and libhbcore, which the op library links to.
import hbcore  # noqa: F401
import tensorflow as tf

from hbcore_tf._ops import build
from hbcore_tf._patches import auto_control_deps

lib = tf.load_op_library(build.op_library_path())


def collectives_unordered() -> None:
    """Called before each collective op is built: the first call adds
    hbcore's collective ops to TF's "must run, order insensitive" stateful
    ops (hbcore_tf._patches.auto_control_deps says why: tf.function would
    otherwise chain them, with no fusion and a possible deadlock); later
    calls return at once."""
    auto_control_deps.install(("HbcoreCollective", "HbcoreAlltoall"))
