"""hb.train.StepStatHook (hbcore_tf/train/step_stat_hook.py), in one plain
process (world size 1; the hook runs no collective, every rank reports its
own numbers).

The hook's clock is replaced by a list of timestamps, so each step's
duration is known; the test captures TensorFlow's log and compares each
line with the statistics numpy computes from those durations and from the
counts the test fed: a fixed batch size in hb.train.MonitoredTrainingSession
(windows of N steps, the remainder at the end), batch sizes read from a
tensor (a dataset whose last batch is short) in TF's MonitoredSession, no
count and no window. One run on the real clock checks the numbers against
the wall time the test measured; bad arguments raise typed errors.
"""

import pytest

from support.harness import python_result
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

CODE = r"""
import json, logging, time
import numpy as np
import tensorflow as tf
import hbcore_tf as hb
import hbcore_tf.train.step_stat_hook as step_stat_hook
V1 = tf.compat.v1
V1.logging.set_verbosity(V1.logging.INFO)
lines = []

class Capture(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("secs/step"):
            lines.append(message)

logging.getLogger("tensorflow").addHandler(Capture())

def fake_clock(durations):
    # The hook reads the clock once in before_run and once in after_run:
    # step k starts at 10 k and lasts durations[k].
    stamps = []
    for k, d in enumerate(durations):
        stamps += [10.0 * k, 10.0 * k + d]
    stamps += [1e6] * 4   # a before_run whose step raises (end of data)
    it = iter(stamps)
    return lambda: next(it)

def captured(fn):
    del lines[:]
    fn()
    return list(lines)

out = {}

# 1. batch size 4, every 3 steps, 7 steps, in hb.train.MonitoredTrainingSession
#    (its broadcast run in after_create_session is not a step).
d1 = [0.5, 0.25, 1.0, 0.125, 2.0, 0.75, 4.0]
def fixed():
    step_stat_hook._clock = fake_clock(d1)
    with tf.Graph().as_default():
        w = V1.get_variable("w", initializer=tf.constant([1.0]))
        step = V1.train.get_or_create_global_step()
        train = tf.group(w.assign_add([1.0]), step.assign_add(1))
        hook = hb.train.StepStatHook(every_n_iter=3, count=4)
        with hb.train.MonitoredTrainingSession(
                hooks=[hook], save_summaries_steps=None,
                log_step_count_steps=None) as sess:
            for _ in range(7):
                sess.run(train)
out["fixed"] = {"lines": captured(fixed), "durations": d1}

# 2. the batch size from a tensor: 10 records in batches of 3 (3, 3, 3, 1),
#    every 2 steps, until the data runs out.
d2 = [0.5, 1.5, 0.25, 0.75]
def fetched():
    step_stat_hook._clock = fake_clock(d2)
    with tf.Graph().as_default():
        batch = V1.data.make_one_shot_iterator(
            tf.data.Dataset.range(10).batch(3)).get_next()
        hook = hb.train.StepStatHook(every_n_iter=2,
                                     count=tf.shape(batch)[0], unit="record")
        with V1.train.MonitoredSession(hooks=[hook]) as sess:
            while not sess.should_stop():
                sess.run(batch)
out["fetched"] = {"lines": captured(fetched), "durations": d2}

# 3. no count, no window: one line for the session, at its end; equal
#    durations are fully stable (100%).
d3 = [0.25] * 5
def plain():
    step_stat_hook._clock = fake_clock(d3)
    with tf.Graph().as_default():
        x = tf.constant(1.0)
        with V1.train.MonitoredSession(
                hooks=[hb.train.StepStatHook()]) as sess:
            for _ in range(5):
                sess.run(x)
out["plain"] = {"lines": captured(plain), "durations": d3}

# 4. the real clock: 6 steps of batch 8; the wall time around them bounds
#    the hook's step times from above.
def real():
    step_stat_hook._clock = time.perf_counter
    with tf.Graph().as_default():
        x = tf.reduce_sum(tf.random.uniform([64, 64]))
        with V1.train.MonitoredSession(hooks=[hb.train.StepStatHook(
                every_n_iter=6, count=8)]) as sess:
            start = time.perf_counter()
            for _ in range(6):
                sess.run(x)
            out["real_wall"] = time.perf_counter() - start
out["real"] = {"lines": captured(real)}

errors = {}
with tf.Graph().as_default():
    cases = {
        "zero": lambda: hb.train.StepStatHook(every_n_iter=0),
        "float_n": lambda: hb.train.StepStatHook(every_n_iter=2.5),
        "bool_n": lambda: hb.train.StepStatHook(every_n_iter=True),
        "string_count": lambda: hb.train.StepStatHook(count="64"),
        "negative_count": lambda: hb.train.StepStatHook(count=-1),
        "op_count": lambda: hb.train.StepStatHook(count=tf.no_op()),
        "vector_count": lambda: hb.train.StepStatHook(
            count=tf.constant([1, 2])),
        "string_tensor": lambda: hb.train.StepStatHook(
            count=tf.constant("a")),
        "unit": lambda: hb.train.StepStatHook(count=1, unit=3),
    }
    for label, call in cases.items():
        try:
            call()
            errors[label] = None
        except Exception as exc:
            errors[label] = [type(exc).__name__, str(exc)]
out["errors"] = errors
print("RESULT " + json.dumps(out))
"""


def expected_line(durations, counts=None, unit="sample"):
    """HybridBackend's line for one window, from numpy."""
    import numpy as np

    durs = np.array(durations, np.float64)
    p10, p50, p90 = (np.percentile(durs, q) for q in (10, 50, 90))
    stable = 100.0 if p10 == p90 else 100.0 * p10 / p90
    line = "secs/step: %.5f (%.2f%%)" % (p50, stable)
    if counts is not None:
        line += ", %ss/sec: %.2f" % (unit, sum(counts) / durs.sum())
    return line


@pytest.fixture(scope="module")
def result():
    return python_result(CODE)


def test_fixed_batch_size_every_n_steps(result):
    d = result["fixed"]["durations"]
    # Windows of exactly 3 steps, then the 7th step at the session's end.
    assert result["fixed"]["lines"] == [
        expected_line(d[0:3], [4] * 3), expected_line(d[3:6], [4] * 3),
        expected_line(d[6:7], [4])]
    # Spelled out once: steps 0.5, 0.25, 1.0 s of 4 samples each.
    assert result["fixed"]["lines"][0] == (
        "secs/step: 0.50000 (%.2f%%), samples/sec: 6.86"
        % (100.0 * 0.3 / 0.9))


def test_batch_size_from_a_tensor(result):
    d = result["fetched"]["durations"]
    assert result["fetched"]["lines"] == [
        expected_line(d[0:2], [3, 3], "record"),
        expected_line(d[2:4], [3, 1], "record")]
    assert result["fetched"]["lines"][1].endswith("records/sec: 4.00")


def test_no_count_logs_at_the_end(result):
    assert result["plain"]["lines"] == [
        "secs/step: 0.25000 (100.00%)"]


def test_real_clock_is_bounded_by_the_wall_time(result):
    lines = result["real"]["lines"]
    assert len(lines) == 1, lines
    head, rate = lines[0].split(", samples/sec: ")
    p50 = float(head.split()[1])
    wall = result["real_wall"]
    assert 0 < p50 <= wall
    # 48 samples in at most the measured wall time.
    assert float(rate) >= 48 / wall * 0.999


@pytest.mark.parametrize("label,kind,fragment", [
    ("zero", "ValueError", "every_n_iter must be >= 1"),
    ("float_n", "TypeError", "every_n_iter expects an int"),
    ("bool_n", "TypeError", "every_n_iter expects an int"),
    ("string_count", "TypeError", "count expects a number"),
    ("negative_count", "ValueError", "count must be >= 0"),
    ("op_count", "TypeError", "count expects a number"),
    ("vector_count", "ValueError", "count must be a scalar"),
    ("string_tensor", "TypeError", "count must be numeric"),
    ("unit", "TypeError", "unit expects a str"),
])
def test_bad_arguments(result, label, kind, fragment):
    got = result["errors"][label]
    assert got is not None, label
    assert got[0] == kind and fragment in got[1], got
