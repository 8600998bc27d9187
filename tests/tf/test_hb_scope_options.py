"""hb.scope / @hb.function arguments (world size 1, a fresh process each):

- numpy scalars are accepted as the Python value they stand for
  (``grad_nbuckets=np.int64(2)``, ``sharding=np.bool_(True)``), stored as
  Python values, while a bool for an int option or an int for a bool
  option stays a TypeError naming the option; ``hb.function(2)`` is a
  TypeError when applied (before: a wrapper that failed when called);
- ``seed=`` (HybridBackend's scope argument) seeds Python's, numpy's and
  TensorFlow's random generators as ``random.seed``/``np.random.seed``/
  ``tf.random.set_seed`` with that value do; a seed that is not an int is
  a TypeError naming ``seed``, raised by ``hb.function`` when it is
  applied.
"""

import pytest

from support.harness import python_result
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))


def _result(code: str) -> dict:
    return python_result(code)


NUMPY_CODE = r"""
import json
import numpy as np
import hbcore_tf as hb
from hbcore_tf._base.options import options

out = {}
with hb.scope(grad_nbuckets=np.int64(3), sharding=np.bool_(False),
              emb_min_rows_to_shard=np.int32(5)):
    out["inside"] = [options.grad_nbuckets, options.sharding,
                     options.emb_min_rows_to_shard]
    out["types"] = [type(options.grad_nbuckets).__name__,
                    type(options.sharding).__name__,
                    type(options.emb_min_rows_to_shard).__name__]
out["after"] = options.grad_nbuckets
hb.context.update_params(grad_nbuckets=np.int16(2))
out["update"] = [options.grad_nbuckets, type(options.grad_nbuckets).__name__]
errors = []
for name, value in (("grad_nbuckets", np.bool_(True)), ("sharding", 1),
                    ("grad_nbuckets", np.float64(2.0))):
    try:
        with hb.scope(**{name: value}):
            pass
        errors.append(None)
    except TypeError as exc:
        errors.append(str(exc))
out["errors"] = errors
try:
    hb.function(2)
    out["not_callable"] = None
except TypeError as exc:
    out["not_callable"] = str(exc)
print("RESULT " + json.dumps(out))
"""


def test_numpy_option_values():
    result = _result(NUMPY_CODE)
    assert result["inside"] == [3, False, 5], result
    assert result["types"] == ["int", "bool", "int"], result
    assert result["after"] == 1, result
    assert result["update"] == [2, "int"], result
    for error, name, kind in zip(result["errors"],
                                 ("grad_nbuckets", "sharding",
                                  "grad_nbuckets"),
                                 ("int", "bool", "int")):
        assert error is not None and \
            "option %s expects a value of type %s" % (name, kind) in error, \
            result
    # A positional non-function argument fails when applied, naming it.
    assert result["not_callable"] is not None and \
        "hb.function decorates a function, got 2 (int)" in \
        result["not_callable"], result


SEED_CODE = r"""
import json, random
import numpy as np
import tensorflow as tf
import hbcore_tf as hb

def draws():
    return [random.random(), float(np.random.rand()),
            tf.random.uniform([3]).numpy().tolist()]

random.seed(11); np.random.seed(11); tf.random.set_seed(11)
want = draws()
random.seed(5); np.random.seed(5); tf.random.set_seed(5)
other = draws()

with hb.scope(seed=11):
    in_scope = draws()

@hb.function(seed=np.int64(11))
def decorated():
    return draws()

in_function = decorated()
errors = []
for make in (lambda: hb.scope(seed="11").__enter__(),
             lambda: hb.function(seed=1.5),
             lambda: hb.scope(seed=True).__enter__()):
    try:
        make()
        errors.append(None)
    except TypeError as exc:
        errors.append(str(exc))
print("RESULT " + json.dumps({"want": want, "other": other,
                              "in_scope": in_scope,
                              "in_function": in_function,
                              "errors": errors}))
"""


def test_seed():
    result = _result(SEED_CODE)
    assert result["want"] != result["other"], result  # the draws use seeds
    assert result["in_scope"] == result["want"], result
    assert result["in_function"] == result["want"], result
    for error in result["errors"]:
        assert error is not None and "seed expects an int" in error, result


HB_OPTIONS_CODE = r"""
import json
import os
# HybridBackend has no variables for these options: an unrelated HB_MODE or
# HB_BATCH_SIZE in the shell must not be read (nor break the options).
os.environ.update(HB_BATCH_SIZE="abc", HB_MODE="x", HB_EMB_NUM_GROUPS="3")
import tensorflow as tf
import hbcore_tf as hb
from hbcore_tf._base.options import options

out = {"from_env": [options.batch_size, options.mode, options.emb_num_groups]}

tf.compat.v1.disable_eager_execution()
# HybridBackend's own scripts pass these (its Criteo example:
# @hb.function(emb_device='/cpu:0')); they were unknown-option ValueErrors.
accepted = dict(mode="train", batch_size=512, model_dir="/tmp/m",
                grad_lazy_sync=True, use_hierarchical_embedding_lookup=True,
                emb_backend="default", emb_num_groups=2,
                emb_enable_concat=False, emb_device="/cpu:0",
                emb_input_device={"user": "/cpu:0"}, emb_dtype=tf.float32,
                emb_input_dtype={"user": tf.int64}, emb_pad=True,
                emb_num_buckets_max=1000, emb_segment_rank=1,
                emb_buffer_size=100, emb_buffer_load_factor=0.75,
                emb_wire_dtype=tf.float16)

@hb.function(**accepted)
def read():
    return {name: options.as_dict()[name] for name in accepted}

got = read()
out["stored"] = {k: (v if isinstance(v, (str, int, float, bool)) else repr(v))
                 for k, v in got.items()}
errors = {}
for kwargs in ({"emb_backend": "HASH"}, {"keep_checkpoint_max": -1},
               {"keep_checkpoint_max": "x"}, {"keep_checkpoint_max": 2.5},
               {"keep_checkpoint_every_n_hours": True}):
    try:
        with hb.scope(**kwargs):
            pass
        errors[repr(kwargs)] = None
    except (TypeError, ValueError) as exc:
        errors[repr(kwargs)] = [type(exc).__name__, str(exc)]
out["errors"] = errors
# Savers made inside the scope take keep_checkpoint_max / _every_n_hours
# (as HybridBackend's scope sets them); an explicit argument wins.
with tf.Graph().as_default():
    tf.compat.v1.Variable(1.0, name="v")
    with hb.scope(keep_checkpoint_max=2, keep_checkpoint_every_n_hours=3):
        default = tf.compat.v1.train.Saver()
        explicit = tf.compat.v1.train.Saver(max_to_keep=7)
    outside = tf.compat.v1.train.Saver()
    out["savers"] = [
        [s.saver_def.max_to_keep, s.saver_def.keep_checkpoint_every_n_hours]
        for s in (default, explicit, outside)]
print("RESULT " + json.dumps(out))
"""


def test_hybridbackend_options_accepted():
    """HybridBackend's other documented options are accepted (the ones
    that tune its own kernels change nothing here, documented as such);
    emb_backend other than DEFAULT or PAIEV, and keep_checkpoint_* of the
    wrong type or sign, are errors naming the option; a Saver made in the
    scope takes keep_checkpoint_max / keep_checkpoint_every_n_hours."""
    out = _result(HB_OPTIONS_CODE)
    assert out["from_env"] == [-1, None, 3], out["from_env"]
    stored = out["stored"]
    assert stored["emb_backend"] == "DEFAULT", stored
    assert stored["emb_wire_dtype"] == "float16", stored
    assert stored["emb_device"] == "/cpu:0" and stored["mode"] == "train"
    assert stored["batch_size"] == 512 and stored["grad_lazy_sync"] is True
    errors = out["errors"]
    kind, message = errors[repr({"emb_backend": "HASH"})]
    assert kind == "ValueError" and "emb_backend" in message and \
        "DEFAULT, PAIEV" in message, message
    kind, message = errors[repr({"keep_checkpoint_max": -1})]
    assert kind == "ValueError" and "keep_checkpoint_max" in message
    for bad in ({"keep_checkpoint_max": "x"}, {"keep_checkpoint_max": 2.5},
                {"keep_checkpoint_every_n_hours": True}):
        kind, message = errors[repr(bad)]
        assert kind in ("TypeError", "ValueError"), (bad, kind)
        assert list(bad)[0] in message, (bad, message)
    assert out["savers"] == [[2, 3.0], [7, 3.0], [5, 10000.0]], out["savers"]


# @hb.function over a tf.function keeps get_concrete_function (it was a
# plain wrapper that lost it) and traces inside the scope either way.
TF_FUNCTION_CODE = r"""
import json
import tensorflow as tf
import hbcore_tf as hb
from hbcore_tf._base.options import options

seen = []

@hb.function(grad_nbuckets=4)
@tf.function
def step(x):
    seen.append(options.grad_nbuckets)
    return x * 2.0

concrete = step.get_concrete_function(tf.TensorSpec([2], tf.float32))
value = step(tf.constant([1.0, 3.0])).numpy().tolist()
count = step.experimental_get_tracing_count()

class Model:
    def __init__(self):
        self.k = 5.0

    @hb.function(grad_nbuckets=6)
    @tf.function
    def apply(self, x):
        seen.append(options.grad_nbuckets)
        return x * self.k

method_value = Model().apply(tf.constant(2.0)).numpy().item()
print("RESULT " + json.dumps({
    "concrete_output": concrete(tf.constant([2.0, 5.0])).numpy().tolist(),
    "value": value, "tracing_count": count, "seen": seen,
    "name": step.__name__, "method_value": method_value,
    "outside": options.grad_nbuckets}))
"""


def test_hb_function_over_tf_function():
    result = _result(TF_FUNCTION_CODE)
    assert result["concrete_output"] == [4.0, 10.0], result
    assert result["value"] == [2.0, 6.0], result
    assert result["tracing_count"] == 1, result  # the call reused the trace
    assert result["seen"] == [4, 6], result  # traced inside each scope
    assert result["name"] == "step", result
    assert result["method_value"] == 10.0, result
    assert result["outside"] != 4, result
