"""hb.scope opened on two threads at once (world size 1, no launcher).

TensorFlow's variable creator stack is per thread: each thread's hb.scope
pushes its own creators and pops them on that thread, while the class
patches are installed once for the process. Each case runs in a fresh
process; the broadcast of initial values is observed by wrapping
hbcore_tf.mpi_ops.broadcast (hb.scope's creator looks it up per call).
"""

import pytest

from support.harness import python_result
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

CODE = r"""
import json, threading
import tensorflow as tf
import hbcore_tf as hb
from hbcore_tf import mpi_ops
import importlib
scope_module = importlib.import_module("hbcore_tf.scope")  # hb.scope: the function

broadcasts = []
original = mpi_ops.broadcast
def recording_broadcast(tensor, root_rank, name=None, **kwargs):
    broadcasts.append((threading.current_thread().name, name))
    return original(tensor, root_rank, name=name, **kwargs)
mpi_ops.broadcast = recording_broadcast

a_in, b_in, a_out, b_out = (threading.Event() for _ in range(4))
errors = []
FIRST_OUT = %(first_out)r

def guarded(fn):
    def run():
        try:
            fn()
        except BaseException as e:
            errors.append("%%s: %%r" %% (threading.current_thread().name, e))
            for event in (a_in, b_in, a_out, b_out):
                event.set()
    return run

def thread_a():
    with hb.scope():
        a_in.set()
        b_in.wait(60)
        tf.Variable(1.0)
        if FIRST_OUT == "b":
            b_out.wait(60)
    a_out.set()

def thread_b():
    a_in.wait(60)
    with hb.scope():
        b_in.set()
        tf.Variable(2.0)
        if FIRST_OUT == "a":
            a_out.wait(60)
    b_out.set()

threads = [threading.Thread(target=guarded(fn), name=name)
           for fn, name in ((thread_a, "a"), (thread_b, "b"))]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
during = sorted(thread for thread, _ in broadcasts)
tf.Variable(3.0)  # after both scopes: no creator left on this thread
after_main = len(broadcasts) - len(during)
leftover = []
def create_after():
    tf.Variable(4.0)
    leftover.append(len(broadcasts) - len(during) - after_main)
t = threading.Thread(target=create_after)
t.start(); t.join(60)
print("RESULT " + json.dumps({
    "errors": errors, "alive": [t.name for t in threads if t.is_alive()],
    "during": during, "after_main": after_main, "leftover": leftover,
    "patched": scope_module.is_active()}))
"""


@pytest.mark.parametrize("first_out", ["a", "b"])
def test_scope_on_two_threads(first_out):
    result = python_result(CODE % {"first_out": first_out})
    assert result["errors"] == [] and result["alive"] == [], result
    # Each thread's variable went through its own scope's broadcast, once.
    assert result["during"] == ["a", "b"], result
    # Closed on both threads: no creator and no class patch left.
    assert result["after_main"] == 0 and result["leftover"] == [0], result
    assert result["patched"] is False, result
