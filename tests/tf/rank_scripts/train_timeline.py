"""Training steps for the timeline check: one fused collective per step.

Runs under HB_TIMELINE; phases are separated by numpy allreduces named
``phase.<name>`` (they show in the trace), so the test can attribute every
ALLREDUCE collective to a phase and check that each training step issued
exactly one collective carrying every gradient. Run by
tests/tf/test_keras.py (model.fit) and tests/tf/test_tape.py.
"""
import numpy as np

from train_common import rank_values, report, tf

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
import hbcore_tf.keras as hvd_keras  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()  # Keras 3, or tf_keras with TF_USE_LEGACY_KERAS

STEPS = 3
BATCH = 8
LAYERS = 8  # Dense layers: 2 variables each


def marker(name):
    hbcore.allreduce(np.zeros(1, np.float32), name="phase." + name)


def batch(array, step):
    return array[step * BATCH:(step + 1) * BATCH]


def make_model():
    keras.utils.set_random_seed(5)
    layers = [keras.Input((6,))]
    layers += [keras.layers.Dense(6, activation="relu")
               for _ in range(LAYERS - 1)]
    layers.append(keras.layers.Dense(1))
    return keras.Sequential(layers)


def main():
    hvd.init()
    rank = hvd.rank()
    x = rank_values(1, rank, (STEPS * BATCH, 6))
    y = x.sum(axis=1, keepdims=True)
    phases = {}

    # model.fit: the train step is a tf.function.
    marker("fit")
    model = make_model()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(0.01)), loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    phases["fit"] = {"steps": STEPS, "tensors": len(model.trainable_variables)}

    # DistributedGradientTape, eager.
    marker("tape_eager")
    model = make_model()
    opt = keras.optimizers.SGD(0.01)
    for step in range(STEPS):
        xb, yb = batch(x, step), batch(y, step)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    phases["tape_eager"] = {"steps": STEPS,
                            "tensors": len(model.trainable_variables)}

    # DistributedGradientTape inside tf.function.
    marker("tape_function")
    model = make_model()
    opt = keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for step in range(STEPS):
        train_step(batch(x, step), batch(y, step))
    phases["tape_function"] = {"steps": STEPS,
                               "tensors": len(model.trainable_variables)}

    # DistributedOptimizer.apply_gradients, eager.
    marker("apply_eager")
    model = make_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
    for step in range(STEPS):
        xb, yb = batch(x, step), batch(y, step)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    phases["apply_eager"] = {"steps": STEPS,
                             "tensors": len(model.trainable_variables)}

    # model.fit with backward_passes_per_step=2: one collective per 2 steps.
    marker("fit_bpps2")
    model = make_model()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(0.01), backward_passes_per_step=2), loss="mse")
    xs = np.concatenate([x, x])[:4 * BATCH]
    model.fit(xs, xs.sum(axis=1, keepdims=True), batch_size=BATCH, epochs=1,
              shuffle=False, verbose=0)
    phases["fit_bpps2"] = {"steps": 2,
                           "tensors": len(model.trainable_variables)}
    marker("end")

    report({"rank": rank, "phases": phases, "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
