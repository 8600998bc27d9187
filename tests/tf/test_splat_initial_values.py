"""hb.scope holds a graph variable initialised to one repeated value once
(hbcore_tf._parallel.splat_initial_values): outside hb.scope, the session keeps the
folded initial value as a constant and the variable's first update copies
the variable away from it, so the process holds it twice from then on.

Each configuration runs in a fresh process (world size 1, no launcher):
TensorFlow keeps freed buffers for reuse, so a second measurement in the
same process would not see the copy. Memory is malloc's bytes in live
allocations (glibc mallinfo2), not the RSS, which cannot tell freed pages
that are still resident from live ones. The values of the table after the
updates are compared with plain TensorFlow in tests/tf/rank_scripts/
hb_scope.py (v1_splat_initial_values, at 2 and 3 ranks).
"""
import numpy as np
import pytest

from support.harness import run_python
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

TABLE_BYTES = (1 << 21) * 4 * 4

CODE = r"""
import contextlib, ctypes
import tensorflow as tf
import hbcore_tf as hb

V1 = tf.compat.v1
V1.disable_eager_execution()

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd

in_scope = %(config)r == "scope"
with tf.Graph().as_default():
    with hb.scope() if in_scope else contextlib.nullcontext():
        table = V1.get_variable(
            "table", shape=[1 << 21, 4], use_resource=True,
            initializer=V1.constant_initializer(%(value)r))
        ids = tf.constant([3, 17, (1 << 21) - 1], tf.int64)
        update = table.scatter_add(tf.IndexedSlices(tf.ones([3, 4]), ids))
    with V1.Session() as sess:
        sess.run(V1.global_variables_initializer())
        before = in_use()
        for _ in range(2):
            sess.run(update)
        grown = in_use() - before
        row = sess.run(table)[17]
print("GROWN %%d ROW %%s" %% (grown, row.tolist()))
"""


@pytest.mark.parametrize("value", [0.0, 0.1])
def test_splat_table_is_held_once_in_scope(value):
    grown = {}
    for config in ("plain", "scope"):
        run = run_python(CODE % {"value": value, "config": config},
                         timeout=180)
        assert run.returncode == 0, run.describe()
        line = [ln for ln in run.stdout.splitlines()
                if ln.startswith("GROWN ")]
        assert line, run.describe()
        words = line[0].split(" ", 3)
        grown[config] = int(words[1])
        # Two scatter-adds of 1.0 onto the initial value, in float32.
        expected = np.float32(value) + np.float32(1.0) + np.float32(1.0)
        assert words[3] == str([float(expected)] * 4), line[0]
    # The control: plain TensorFlow copies the table at its first update.
    assert grown["plain"] > 0.8 * TABLE_BYTES, grown
    assert grown["scope"] < 0.2 * TABLE_BYTES, grown
