"""Mixed precision under hbcore: every way a user writes it, with one
rank's local fp16 gradient overflowing and the others' not. Keras 3 by
default, tf_keras when TF_USE_LEGACY_KERAS=1; run by
tests/tf/test_mixed_precision.py at 2 and 3 ranks.

Each Keras case trains one small model under the ``mixed_float16`` policy
(its first Dense computes in float16, the output layer in float32) in
three phases, with a fixed global batch of BATCH rows per rank per step:

1. STEPS steps on ordinary data, where no rank overflows: the weights must
   equal one process trained on the whole batch (rank 0 trains it here,
   with plain Keras and no hbcore) within float16 tolerance, be
   bit-identical on every rank, and the loss scale must be the initial one.
2. One step in which the last rank's shard holds a target far from the
   prediction. Checked first, with a plain local tape at the current loss
   scale: that rank's scaled gradient overflows float16 and every other
   rank's does not. Then the step: no rank may stall, every rank must skip
   it (weights bit-identical to before the step) and halve its loss scale.
3. One more ordinary step: the ranks apply it and stay bit-identical.

The ways: the LossScaleOptimizer added by ``compile`` under the policy,
written outside hvd.DistributedOptimizer, written inside it, fp16
gradient compression on top, a custom loop with DistributedGradientTape,
a model built in ``hb.scope()``, and a model with a sharded embedding
table (ShardedEmbedding), where only the table's gradient overflows, and
only on the rank that owns the row (the gradients hbcore does not
allreduce must lead to the same decision too). The tf.compat.v1 cases run
a graph with MixedPrecisionLossScaleOptimizer, under
hb.train.MonitoredTrainingSession in hb.scope and inside / outside
hvd.DistributedOptimizer, through the same three phases.
"""
import contextlib
import warnings
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from train_common import tf  # noqa: F401  (TensorFlow before Keras)
from train_common import (Checker, check, close,  # noqa: E402
                          identical_on_all_ranks, rank_values, report,
                          run_table)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = _compat.use_legacy_keras()

KERAS_CASES = [
    "compile_adds_loss_scale",
    "loss_scale_outside",
    "loss_scale_inside",
    "fp16_compression",
    "gradient_tape_loop",
    "hb_scope_model",
    "sharded_embedding",
    "backward_passes_with_loss_scale",
    "collective_in_cond_branch_warns_once",
]
# tf_keras' legacy optimizers (OptimizerV2; Keras 3 has none).
TF_KERAS_CASES = [
    "legacy_optimizer",
]
V1_CASES = [
    "v1_monitored_session_in_hb_scope",
    "v1_loss_scale_inside_distributed",
    "v1_dense_features_in_hb_scope",
]
# Keras 3's launch skips TF_KERAS_CASES, tf_keras' skips V1_CASES (the v1
# graphs do not depend on the Keras flavour: they run once).
CASES = KERAS_CASES + TF_KERAS_CASES + V1_CASES
BRANCH_WARNING = "inside a branch of a tf.cond"

BATCH = 4          # rows per rank per step
STEPS = 3          # ordinary steps before the overflow
LR = 0.5
SEED = 7
FAR_TARGET = -50.0  # the overflowing row's target: |d loss| * 2**15 > 65504
ROWS = 6           # ids of the sharded table (every rank owns some)
FAR_SCALE = 100.0  # sharded case: the overflowing row's weight on its id
# float16 tolerance: one process and N ranks round differently in the
# float16 backward (per-shard versus whole-batch means).
RTOL, ATOL = 1e-2, 1e-4


# --- data ------------------------------------------------------------------------

def ordinary(step: int, rank: int) -> Tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s rows of ordinary step ``step``: small inputs and
    targets, so that no scaled float16 gradient overflows."""
    x = 0.1 * rank_values(100 + step, rank, (BATCH, 4))
    y = 0.1 * rank_values(200 + step, rank, (BATCH, 1))
    return x, y


def overflowing(rank: int, size: int) -> Tuple[np.ndarray, np.ndarray]:
    """The overflow step's rows: the last rank's first target is far."""
    x, y = ordinary(STEPS, rank)
    if rank == size - 1:
        y = y.copy()
        y[0, 0] = FAR_TARGET
    return x, y


def whole_batch(step: int, size: int) -> Tuple[np.ndarray, np.ndarray]:
    parts = [ordinary(step, r) for r in range(size)]
    return (np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]))


# --- models ------------------------------------------------------------------------

def make_model() -> Any:
    """Dense(8, tanh) in float16, Dense(1) in float32 (the policy's
    output layer), the same initial weights on every rank."""
    keras.utils.set_random_seed(SEED)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    outputs = keras.layers.Dense(1, dtype="float32")(hidden)
    return keras.Model(inputs, outputs)


def loss_scale(optimizer: Any) -> float:
    """The current loss scale of a (distributed) LossScaleOptimizer."""
    if LEGACY:
        return float(np.asarray(optimizer.loss_scale))
    if not optimizer.built:  # Keras 3 creates its scale variable in build
        return float(optimizer.initial_scale)
    return float(np.asarray(optimizer.dynamic_scale))


def weights(model: Any) -> List[np.ndarray]:
    return [np.asarray(w) for w in model.get_weights()]


def scaled_grads_finite(model: Any, x: np.ndarray, y: np.ndarray,
                        scale: float) -> bool:
    """Whether this rank's own gradient of ``scale`` * loss is finite
    (a plain local tape: what the loss-scale optimizer checks before any
    reduction)."""
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
        loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
        scaled = loss * scale
    grads = tape.gradient(scaled, model.trainable_variables)
    return all(bool(np.all(np.isfinite(np.asarray(g)))) for g in grads
               if g is not None)


class Trainer:
    """One way of training: ``step(x, y)`` runs one step on this rank's
    rows, ``scale()`` reads the current loss scale."""

    def __init__(self, step: Callable[[Any, Any], None],
                 scale: Callable[[], float]) -> None:
        self.step = step
        self.scale = scale


def fit_trainer(model: Any, optimizer: Any) -> Trainer:
    model.compile(optimizer=optimizer, loss="mse")

    def step(x: Any, y: Any) -> None:
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    return Trainer(step, lambda: loss_scale(model.optimizer))


_reference: Dict[str, List[np.ndarray]] = {}


def reference_weights(size: int) -> List[np.ndarray]:
    """Rank 0: one process, plain Keras under the same policy (compile adds
    its LossScaleOptimizer), STEPS steps on the whole batch."""
    if "dense" not in _reference:
        model = make_model()
        model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
        for step in range(STEPS):
            x, y = whole_batch(step, size)
            model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False,
                      verbose=0)
        _reference["dense"] = weights(model)
    return _reference["dense"]


def three_phases(trainer: Trainer, rank: int, size: int,
                 reference: Callable[[], List[np.ndarray]],
                 state: Callable[[], List[np.ndarray]],
                 overflow_rows: Callable[[], Tuple[Any, Any]],
                 scaled_finite: Callable[[Any, Any, float], bool],
                 ordinary_rows: Callable[[int], Tuple[Any, Any]]) -> None:
    """The three phases of the module docstring for one trainer."""
    initial_scale = trainer.scale()
    initial = state()
    for step in range(STEPS):
        trainer.step(*ordinary_rows(step))
    trained = state()
    identical_on_all_ranks(trained, "weights after the ordinary steps")
    check(trainer.scale() == initial_scale,
          "an ordinary step was skipped: loss scale %s, initially %s" % (
              trainer.scale(), initial_scale))
    moved = max(float(np.max(np.abs(a - b)))
                for a, b in zip(trained, initial))
    check(moved > 10 * ATOL, "the weights barely moved (%g)" % moved)
    if rank == 0:
        for i, (got, want) in enumerate(zip(trained, reference())):
            close(got, want, "weight %d against one process on the whole "
                  "batch" % i, rtol=RTOL, atol=ATOL)

    x, y = overflow_rows()
    scale = trainer.scale()
    finite = hbcore.allgather_object(scaled_finite(x, y, scale))
    check(not all(finite) and any(finite),
          "the overflow step must overflow on some ranks only; finite per "
          "rank: %s" % finite)
    trainer.step(x, y)
    after = state()
    identical_on_all_ranks(after, "weights after the overflow step")
    for i, (a, b) in enumerate(zip(after, trained)):
        check(np.array_equal(a, b), "weight %d changed in the overflow "
              "step: it was not skipped" % i)
    scales = hbcore.allgather_object(trainer.scale())
    check(scales == [scale / 2] * size,
          "loss scales after the overflow step: %s, expected %s on every "
          "rank" % (scales, scale / 2))

    trainer.step(*ordinary_rows(STEPS + 1))
    last = state()
    identical_on_all_ranks(last, "weights after the step that follows")
    check(any(not np.array_equal(a, b) for a, b in zip(last, after)),
          "the step after the overflow was not applied")


# --- Keras cases ----------------------------------------------------------------------

def keras_cases(rank: int, size: int) -> Dict[str, Callable[[], None]]:
    def run_dense(model: Any, trainer: Trainer) -> None:
        three_phases(
            trainer, rank, size, lambda: reference_weights(size),
            lambda: weights(model), lambda: overflowing(rank, size),
            lambda x, y, s: scaled_grads_finite(model, x, y, s),
            lambda step: ordinary(step, rank))

    def sgd() -> Any:
        return keras.optimizers.SGD(LR)

    def compile_adds_loss_scale() -> None:
        model = make_model()
        run_dense(model, fit_trainer(model, hvd.DistributedOptimizer(sgd())))
        check("LossScaleOptimizer" in type(model.optimizer).__name__,
              "compile did not add a LossScaleOptimizer: %s" % type(
                  model.optimizer).__name__)

    def fit_dense(optimizer: Any) -> None:
        model = make_model()
        run_dense(model, fit_trainer(model, optimizer))

    def loss_scale_outside() -> None:
        fit_dense(keras.mixed_precision.LossScaleOptimizer(
            hvd.DistributedOptimizer(sgd())))

    def loss_scale_inside() -> None:
        fit_dense(hvd.DistributedOptimizer(
            keras.mixed_precision.LossScaleOptimizer(sgd())))

    def fp16_compression() -> None:
        fit_dense(hvd.DistributedOptimizer(
            sgd(), compression=hvd.Compression.fp16))

    def gradient_tape_loop() -> None:
        model = make_model()
        optimizer = keras.mixed_precision.LossScaleOptimizer(sgd())
        variables = model.trainable_variables

        @tf.function
        def train_step(x: Any, y: Any) -> None:
            with tf.GradientTape() as tape:
                pred = tf.cast(model(x, training=True), tf.float32)
                loss = tf.reduce_mean(tf.square(pred - y))
                scaled = (optimizer.get_scaled_loss(loss) if LEGACY
                          else optimizer.scale_loss(loss))
            tape = hb.DistributedGradientTape(tape)
            grads = tape.gradient(scaled, variables)
            if LEGACY:
                optimizer.apply_gradients(
                    zip(optimizer.get_unscaled_gradients(grads), variables))
            else:
                optimizer.apply(grads, variables)  # unscales by itself

        run_dense(model, Trainer(lambda x, y: train_step(
            tf.constant(x), tf.constant(y)), lambda: loss_scale(optimizer)))

    def hb_scope_model() -> None:
        with hb.scope():
            model = make_model()
            trainer = fit_trainer(model, sgd())
        run_dense(model, trainer)

    def sharded_embedding() -> None:
        sharded_case(rank, size)

    def backward_passes_with_loss_scale() -> None:
        # Gradients are aggregated locally and reduced every 2nd pass, so
        # the LossScaleOptimizer that compile adds decides on local
        # gradients: the ranks agree on its decision explicitly, and the
        # every-2nd-pass reduction runs in a branch every rank takes
        # (no branch warning).
        model = make_model()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            trainer = fit_trainer(model, hvd.DistributedOptimizer(
                sgd(), backward_passes_per_step=2))
            for step in range(2):
                trainer.step(*ordinary(step, rank))
            before = weights(model)
            identical_on_all_ranks(before, "weights after one update")
            scale = trainer.scale()
            trainer.step(*overflowing(rank, size))
            identical_on_all_ranks(weights(model),
                                   "weights after the overflow pass")
            scales = hbcore.allgather_object(trainer.scale())
            check(scales == [scale / 2] * size,
                  "loss scales after the overflow pass: %s, expected %s"
                  % (scales, scale / 2))
            for step in range(2):
                trainer.step(*ordinary(STEPS + 1 + step, rank))
            after = weights(model)
            identical_on_all_ranks(after, "weights after the next update")
            check(any(not np.array_equal(a, b)
                      for a, b in zip(after, before)),
                  "no update was applied after the overflow pass")
        branch = [str(w.message) for w in seen
                  if BRANCH_WARNING in str(w.message)]
        check(not branch, "rank-uniform branches warned: %s" % branch)

    def legacy_optimizer() -> None:
        fit_dense(hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(LR)))

    def collective_in_cond_branch_warns_once() -> None:
        value = tf.constant([1.0, 2.0])

        @tf.function
        def diverging(flag: Any) -> Any:
            return tf.cond(flag > 0,
                           lambda: hb.allreduce(value, name="in_branch"),
                           lambda: value)

        @tf.function
        def step() -> Any:
            return hb.allreduce(value, name="in_function")

        @tf.function
        def calls_a_function_in_a_branch(flag: Any) -> Any:
            # The branch is around a call of another tf.function (as Keras
            # 3's steps_per_execution loop calls its train step): the
            # function's collective is not reported.
            return tf.cond(flag > 0, step, lambda: value)

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            # Traced only (no rank runs it): the warning is a trace-time
            # one. Two signatures trace it twice; it warns once.
            diverging.get_concrete_function(tf.TensorSpec((), tf.float32))
            diverging.get_concrete_function(tf.TensorSpec((), tf.int32))
            calls_a_function_in_a_branch.get_concrete_function(
                tf.TensorSpec((), tf.float32))
        branch = [str(w.message) for w in seen
                  if BRANCH_WARNING in str(w.message)]
        check(len(branch) == 1, "expected one branch warning, got %s"
              % branch)
        for fragment in ("in_branch", "wait for the others forever",
                         "allreduce it first", "out of the branch"):
            check(fragment in branch[0], "the warning does not say %r: %s"
                  % (fragment, branch[0]))

    return {
        "compile_adds_loss_scale": compile_adds_loss_scale,
        "loss_scale_outside": loss_scale_outside,
        "loss_scale_inside": loss_scale_inside,
        "fp16_compression": fp16_compression,
        "gradient_tape_loop": gradient_tape_loop,
        "hb_scope_model": hb_scope_model,
        "sharded_embedding": sharded_embedding,
        "backward_passes_with_loss_scale": backward_passes_with_loss_scale,
        "collective_in_cond_branch_warns_once":
        collective_in_cond_branch_warns_once,
        "legacy_optimizer": legacy_optimizer,
    }


# --- sharded table -----------------------------------------------------------------

def sharded_rows(step: int, rank: int, far: bool = False
                 ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """Inputs of the sharded model: dense features, one id and a weight
    per row. The overflow step gives the last rank's first row a large
    weight on its id: the table starts at zero, so the forward pass is
    unchanged and only that row's table gradient (weight * d loss)
    overflows."""
    x, y = ordinary(step, rank)
    rng = np.random.default_rng([300 + step, rank])
    ids = rng.integers(0, ROWS, size=(BATCH, 1)).astype(np.int64)
    weight = np.ones((BATCH, 1), np.float32)
    if far:
        weight[0, 0] = FAR_SCALE
    return {"x": x, "id": ids, "w": weight}, y


def make_sharded_model(table: Any) -> Any:
    keras.utils.set_random_seed(SEED)
    x = keras.Input((4,), name="x")
    ids = keras.Input((1,), name="id", dtype="int64")
    weight = keras.Input((1,), name="w")
    hidden = keras.layers.Dense(8, activation="tanh")(x)
    dense = keras.layers.Dense(1, dtype="float32")(hidden)
    rows = keras.layers.Reshape((1,))(table(ids))
    wide = keras.layers.Multiply()([rows, weight])
    outputs = keras.layers.Add(dtype="float32")([dense, wide])
    return keras.Model({"x": x, "id": ids, "w": weight}, outputs)


def sharded_case(rank: int, size: int) -> None:
    table = hvd.layers.ShardedEmbedding(ROWS, 1,
                                        embeddings_initializer="zeros")
    model = make_sharded_model(table)
    trainer = fit_trainer(model, hvd.DistributedOptimizer(
        keras.optimizers.SGD(LR)))

    def state() -> List[np.ndarray]:
        dense = [np.asarray(w) for w in model.get_weights()
                 if w.shape != table.embeddings.shape]
        return dense + [table.full_table()]

    def reference() -> List[np.ndarray]:
        plain = keras.layers.Embedding(ROWS, 1,
                                       embeddings_initializer="zeros")
        ref = make_sharded_model(plain)
        ref.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
        for step in range(STEPS):
            parts = [sharded_rows(step, r) for r in range(size)]
            features = {k: np.concatenate([p[0][k] for p in parts])
                        for k in ("x", "id", "w")}
            y = np.concatenate([p[1] for p in parts])
            ref.fit(features, y, batch_size=len(y), epochs=1,
                    shuffle=False, verbose=0)
        dense = [np.asarray(w) for w in ref.get_weights()
                 if w.shape != (ROWS, 1)]
        return dense + [np.asarray(plain.embeddings)]

    def scaled_finite(features: Any, y: Any, scale: float) -> bool:
        # The table's gradient reaches its owner through the lookup's
        # exchange (a collective: every rank computes it). The dense
        # gradients must stay finite everywhere: only the table's
        # overflows, on the rank owning the far row's id.
        with tf.GradientTape() as tape:
            pred = model(features, training=True)
            loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
            scaled = loss * scale
        grads = tape.gradient(scaled, model.trainable_variables)
        dense_finite = [bool(np.all(np.isfinite(np.asarray(
            tf.convert_to_tensor(g))))) for g, v in zip(
                grads, model.trainable_variables)
            if v.shape != table.embeddings.shape]
        check(all(dense_finite), "a dense gradient overflowed too")
        table_grad = [g for g, v in zip(grads, model.trainable_variables)
                      if v.shape == table.embeddings.shape][0]
        values = (table_grad.values if isinstance(table_grad,
                                                  tf.IndexedSlices)
                  else table_grad)
        return bool(np.all(np.isfinite(np.asarray(values))))

    three_phases(trainer, rank, size, reference, state,
                 lambda: sharded_rows(STEPS, rank, far=rank == size - 1),
                 scaled_finite, lambda step: sharded_rows(step, rank))


# --- tf.compat.v1 -----------------------------------------------------------------------

def v1_cases(rank: int, size: int) -> Dict[str, Callable[[], None]]:
    v1 = tf.compat.v1
    w1_init = rank_values(900, 0, (4, 8)) * 0.5
    w2_init = rank_values(901, 0, (8, 1)) * 0.5

    def numpy_reference() -> List[np.ndarray]:
        # One process on the whole batch, in float64 (the float16 hidden
        # layer of the graph is within the tolerance).
        w1, w2 = w1_init.astype(np.float64), w2_init.astype(np.float64)
        for step in range(STEPS):
            x, y = whole_batch(step, size)
            h = np.tanh(x @ w1)
            d_pred = 2.0 * (h @ w2 - y) / len(x)
            g2 = h.T @ d_pred
            g1 = x.T @ ((d_pred @ w2.T) * (1.0 - h * h))
            w1, w2 = w1 - LR * g1, w2 - LR * g2
        return [w1, w2]

    def run_graph(make_optimizer: Callable[[Any], Any],
                  in_scope: bool) -> None:
        """x @ W1 in float16 -> tanh -> @ W2 in float32, trained by
        ``make_optimizer(GradientDescentOptimizer)`` under a monitored
        session (hb.train's inside hb.scope)."""
        with tf.Graph().as_default():
            scope = hb.scope() if in_scope else contextlib.nullcontext()
            with scope:
                x = v1.placeholder(tf.float32, (None, 4))
                y = v1.placeholder(tf.float32, (None, 1))
                w1 = v1.get_variable("w1", initializer=w1_init)
                w2 = v1.get_variable("w2", initializer=w2_init)
                hidden = tf.tanh(tf.matmul(tf.cast(x, tf.float16),
                                           tf.cast(w1, tf.float16)))
                pred = tf.matmul(tf.cast(hidden, tf.float32), w2)
                loss = tf.reduce_mean(tf.square(pred - y))
                optimizer = make_optimizer(
                    v1.train.GradientDescentOptimizer(LR))
                train = optimizer.minimize(loss)
                # The MixedPrecisionLossScaleOptimizer, wrapped or not.
                lso = (optimizer if hasattr(optimizer, "_loss_scale")
                       else optimizer._optimizer)
                scale_op = lso._loss_scale()
                scale_in = v1.placeholder(tf.float32, ())
                local_grads = tf.gradients(loss * scale_in, [w1, w2])
                session = (hb.train.MonitoredTrainingSession() if in_scope
                           else v1.train.MonitoredTrainingSession())
            with session as sess:
                def step(xs: Any, ys: Any) -> None:
                    sess.run(train, {x: xs, y: ys})

                def finite(xs: Any, ys: Any, scale: float) -> bool:
                    values = sess.run(local_grads, {x: xs, y: ys,
                                                    scale_in: scale})
                    return all(bool(np.all(np.isfinite(v))) for v in values)

                three_phases(
                    Trainer(step, lambda: float(sess.run(scale_op))), rank,
                    size, numpy_reference,
                    lambda: [np.asarray(v) for v in sess.run([w1, w2])],
                    lambda: overflowing(rank, size), finite,
                    lambda s: ordinary(s, rank))

    def v1_monitored_session_in_hb_scope() -> None:
        run_graph(lambda opt: v1.mixed_precision
                  .MixedPrecisionLossScaleOptimizer(opt, "dynamic"),
                  in_scope=True)

    def v1_loss_scale_inside_distributed() -> None:
        run_graph(lambda opt: hb.DistributedOptimizer(
            v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
                opt, "dynamic")), in_scope=False)

    def v1_dense_features_in_hb_scope() -> None:
        dense_features_case(rank, size)

    return {"v1_monitored_session_in_hb_scope":
            v1_monitored_session_in_hb_scope,
            "v1_loss_scale_inside_distributed":
            v1_loss_scale_inside_distributed,
            "v1_dense_features_in_hb_scope": v1_dense_features_in_hb_scope}


def dense_features_case(rank: int, size: int) -> None:
    """hb.keras.layers.DenseFeatures (an embedding column, its table
    sharded by hb.scope) beside float16 dense layers, under
    MixedPrecisionLossScaleOptimizer and hb.train.MonitoredTrainingSession:
    the sharded model of :func:`sharded_case`, as a v1 graph."""
    v1 = tf.compat.v1
    fc = tf.feature_column
    w1_init = rank_values(910, 0, (4, 8)) * 0.5
    w2_init = rank_values(911, 0, (8, 1)) * 0.5

    def numpy_reference() -> List[np.ndarray]:
        w1, w2 = w1_init.astype(np.float64), w2_init.astype(np.float64)
        table = np.zeros(ROWS)
        for step in range(STEPS):
            parts = [sharded_rows(step, r) for r in range(size)]
            x, ids, wts = [np.concatenate([p[0][k] for p in parts])
                           for k in ("x", "id", "w")]
            y = np.concatenate([p[1] for p in parts])
            h = np.tanh(x @ w1)
            pred = h @ w2 + table[ids[:, 0]][:, None] * wts
            d_pred = 2.0 * (pred - y) / len(x)
            g2 = h.T @ d_pred
            g1 = x.T @ ((d_pred @ w2.T) * (1.0 - h * h))
            g_table = np.zeros(ROWS)
            np.add.at(g_table, ids[:, 0], (d_pred * wts)[:, 0])
            w1, w2 = w1 - LR * g1, w2 - LR * g2
            table = table - LR * g_table
        # The dense weights depend on the table through the predictions.
        return [w1, w2]

    with tf.Graph().as_default():
        with hb.scope():
            x = v1.placeholder(tf.float32, (None, 4))
            ids = v1.placeholder(tf.int64, (None, 1))
            wts = v1.placeholder(tf.float32, (None, 1))
            y = v1.placeholder(tf.float32, (None, 1))
            column = fc.embedding_column(
                fc.categorical_column_with_identity("id", ROWS), 1,
                initializer=v1.zeros_initializer())
            layer = hb.keras.layers.DenseFeatures([column])
            rows = layer({"id": ids})
            w1 = v1.get_variable("w1", initializer=w1_init)
            w2 = v1.get_variable("w2", initializer=w2_init)
            hidden = tf.tanh(tf.matmul(tf.cast(x, tf.float16),
                                       tf.cast(w1, tf.float16)))
            wide = tf.cast(rows, tf.float16) * tf.cast(wts, tf.float16)
            pred = (tf.matmul(tf.cast(hidden, tf.float32), w2)
                    + tf.cast(wide, tf.float32))
            loss = tf.reduce_mean(tf.square(pred - y))
            optimizer = v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
                v1.train.GradientDescentOptimizer(LR), "dynamic")
            train = optimizer.minimize(loss)
            scale_op = optimizer._loss_scale()
            table = [v for v in layer.trainable_weights
                     if hb.embedding.is_sharded(v)]
            check(len(table) == 1, "DenseFeatures made no sharded table: "
                  "%s" % layer.trainable_weights)
            scale_in = v1.placeholder(tf.float32, ())
            dense_grads = tf.gradients(loss * scale_in, [w1, w2])
            table_grad = tf.gradients(loss * scale_in, table)[0]
            session = hb.train.MonitoredTrainingSession()
        with session as sess:
            def feed(features: Dict[str, np.ndarray], ys: Any) -> Dict:
                return {x: features["x"], ids: features["id"],
                        wts: features["w"], y: ys}

            def finite(features: Any, ys: Any, scale: float) -> bool:
                fed = feed(features, ys)
                fed[scale_in] = scale
                values = sess.run(dense_grads + [table_grad], fed)
                check(all(np.all(np.isfinite(v)) for v in values[:2]),
                      "a dense gradient overflowed too")
                last = values[2]
                last = getattr(last, "values", last)
                return bool(np.all(np.isfinite(last)))

            three_phases(
                Trainer(lambda f, ys: sess.run(train, feed(f, ys)),
                        lambda: float(sess.run(scale_op))),
                rank, size, numpy_reference,
                lambda: [np.asarray(v) for v in sess.run([w1, w2])],
                lambda: sharded_rows(STEPS, rank, far=rank == size - 1),
                finite, lambda step: sharded_rows(step, rank))


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        table = dict(keras_cases(rank, size))
        table.update(v1_cases(rank, size))
        run_table(checker, table, CASES,
                  skip=V1_CASES if LEGACY else TF_KERAS_CASES)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "cases": checker.results,
            "keras": keras.__name__})


if __name__ == "__main__":
    main()
