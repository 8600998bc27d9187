"""PartialDistributedGradientTape, PartialDistributedOptimizer and
register_local_var cases, with Keras 3 by default or tf_keras when
TF_USE_LEGACY_KERAS=1.

The model is a shared Dense layer (global: its gradients are averaged)
followed by a local Dense layer (its gradients stay on the rank, divided
by size() when scale_local_gradients). Every rank simulates the whole job
in plain TensorFlow (no Keras, no hbcore): each rank's gradients on its
rank-seeded data, the shared update with the mean over ranks, each local
update with that rank's gradient alone. The shared weights must equal the
simulation and be identical on every rank; the local weights must equal
this rank's simulated local-only training and differ between ranks.
Run by tests/tf/test_partial_distributed.py under hbrun.
"""
import inspect

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,
                          identical_on_all_ranks, rank_values, report, tf)

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
import hbcore_tf.keras as hvd_keras  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()

CASES = [
    "signatures", "errors",
    "tape_eager", "tape_tf_function", "tape_unscaled", "tape_single_layer",
    "tape_op_sum", "tape_methods", "tape_split_eager",
    "tape_split_tf_function", "tape_split_no_local",
    "optimizer_apply_eager", "optimizer_apply_tf_function",
    "optimizer_unscaled", "optimizer_fit", "optimizer_bpps2",
    "register_local_var",
]
STEPS = 3
BATCH = 4
LR = 0.1
LOCAL_LAYERS_ERROR = "All local layers must be of tf.keras.layers.Layer type."

# Horovod 0.28's parameter lists.
TAPE_PARAMS = ["gradtape", "device_dense", "device_sparse", "compression",
               "sparse_as_dense", "op", "gradient_predivide_factor",
               "num_groups", "groups", "process_set", "local_layers",
               "scale_local_gradients"]
OPTIMIZER_PARAMS = ["optimizer", "name", "device_dense", "device_sparse",
                    "compression", "sparse_as_dense",
                    "gradient_predivide_factor", "op",
                    "backward_passes_per_step",
                    "average_aggregated_gradients", "groups", "process_set",
                    "local_layers", "scale_local_gradients"]
GRADIENT_PARAMS = ["target", "sources", "output_gradients",
                   "use_generic_names"]
# The methods Horovod 0.28's tapes add to tf.GradientTape's.
HOROVOD_TAPE_METHODS = {"gradient", "get_local_and_global_gradients",
                        "register_local_source"}


def initial_weights():
    """[shared kernel, shared bias, local kernel, local bias], the same on
    every rank."""
    rng = np.random.default_rng(50)
    shapes = [(4, 3), (3,), (3, 2), (2,)]
    return [rng.uniform(-0.7, 0.7, s).astype(np.float32) for s in shapes]


def data(step, rank):
    return (rank_values(60 + step, rank, (BATCH, 4)),
            rank_values(70 + step, rank, (BATCH, 2)))


# --- the independent simulation (plain TensorFlow) ------------------------------

def sim_loss(ws, x, y):
    h = tf.tanh(tf.matmul(x, ws[0]) + ws[1])
    return tf.reduce_mean(tf.square(tf.matmul(h, ws[2]) + ws[3] - y))


def sim_grads(ws, x, y):
    ws = [tf.constant(w) for w in ws]
    with tf.GradientTape() as tape:
        tape.watch(ws)
        loss = sim_loss(ws, tf.constant(x), tf.constant(y))
    return [g.numpy().astype(np.float64) for g in tape.gradient(loss, ws)]


def simulate(size, steps=STEPS, scale_local=True, op_sum=False, bpps=1):
    """Returns (shared weights, [local weights of each rank]) after
    ``steps`` passes of the whole job."""
    init = [w.astype(np.float64) for w in initial_weights()]
    shared = init[:2]
    local = [[w.copy() for w in init[2:]] for _ in range(size)]
    pending = None
    for step in range(steps):
        per_rank = [sim_grads([w.astype(np.float32) for w in shared + local[r]],
                              *data(step, r)) for r in range(size)]
        pending = per_rank if pending is None else [
            [a + b for a, b in zip(p, g)] for p, g in zip(pending, per_rank)]
        if (step + 1) % bpps:
            continue
        reduce = np.sum if op_sum else np.mean
        g_shared = [reduce([g[i] for g in pending], axis=0) for i in (0, 1)]
        shared = [w - LR * g for w, g in zip(shared, g_shared)]
        factor = 1.0 / size if scale_local else 1.0
        for r in range(size):
            local[r] = [w - LR * factor * g
                        for w, g in zip(local[r], pending[r][2:])]
        pending = None
    return shared, local


# --- the model under test ----------------------------------------------------------

def make_layers():
    shared = keras.layers.Dense(3, activation="tanh")
    local = keras.layers.Dense(2)
    shared.build((None, 4))
    local.build((None, 3))
    init = initial_weights()
    shared.set_weights(init[:2])
    local.set_weights(init[2:])
    return shared, local


def model_loss(shared, local, x, y):
    out = local(shared(tf.convert_to_tensor(x)))
    return tf.reduce_mean(tf.square(out - y))


def check_against_simulation(shared, local, **sim_kwargs):
    """Compares with the simulation; the collectives (gathers) come first
    so that a rank whose values differ does not leave its peers waiting."""
    rank, size = hvd.rank(), hvd.size()
    got_shared = [np.asarray(w) for w in shared.get_weights()]
    got_local = [np.asarray(w) for w in local.get_weights()]
    identical_on_all_ranks(got_shared, "shared weights")
    all_local = hbcore.allgather_object(got_local)
    exp_shared, exp_local = simulate(size, **sim_kwargs)
    for i, (a, b) in enumerate(zip(got_shared, exp_shared)):
        close(a, b, "shared weight %d" % i, rtol=1e-4, atol=1e-5)
    for i, (a, b) in enumerate(zip(got_local, exp_local[rank])):
        close(a, b, "local weight %d" % i, rtol=1e-4, atol=1e-5)
    for r in range(1, size):
        check(not np.allclose(all_local[0][0], all_local[r][0]),
              "local kernel of rank %d equals rank 0's" % r)


def public_methods(obj):
    """The names of an object's public methods, sorted."""
    return sorted(n for n in dir(obj)
                  if not n.startswith("_") and callable(getattr(obj, n)))


def split_pairs(tape, loss, variables, local_vars):
    """tape.get_local_and_global_gradients, checked to split ``variables``
    (in their order) into ``local_vars`` and the others."""
    local, shared = tape.get_local_and_global_gradients(loss, variables)
    want_local = [v for v in variables if any(v is w for w in local_vars)]
    want_shared = [v for v in variables if all(v is not w for w in local_vars)]
    for what, pairs, want in (("local", local, want_local),
                              ("global", shared, want_shared)):
        got = [s for s, _ in pairs]
        check(len(got) == len(want) and all(a is b for a, b in zip(got, want)),
              "%s sources %s, expected %s" % (
                  what, [v.name for v in got], [v.name for v in want]))
    return local, shared


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def signatures():
        params = list(inspect.signature(
            hvd.PartialDistributedGradientTape).parameters)
        check(params == TAPE_PARAMS, "tape parameters %s" % params)
        params = list(inspect.signature(
            hvd_keras.PartialDistributedOptimizer).parameters)
        check(params == OPTIMIZER_PARAMS, "optimizer parameters %s" % params)
        for fn in (hvd.PartialDistributedGradientTape,
                   hvd_keras.PartialDistributedOptimizer):
            sig = inspect.signature(fn).parameters
            check(sig["local_layers"].default is None and
                  sig["scale_local_gradients"].default is True,
                  "defaults of %s" % fn.__name__)
        with tf.GradientTape() as tape:
            pass
        wrapped = hvd.PartialDistributedGradientTape(tape)
        params = list(inspect.signature(wrapped.gradient).parameters)
        check(params[:4] == GRADIENT_PARAMS, "gradient parameters %s" % params)

    def errors():
        with tf.GradientTape() as tape:
            pass
        for bad in ([object()], object(), [keras.layers.Dense(1), 3]):
            expect_raises(lambda b=bad: hvd.PartialDistributedGradientTape(
                tape, local_layers=b), ValueError, LOCAL_LAYERS_ERROR)
            expect_raises(lambda b=bad: hvd_keras.PartialDistributedOptimizer(
                keras.optimizers.SGD(LR), local_layers=b), ValueError,
                LOCAL_LAYERS_ERROR)
        expect_raises(lambda: hvd_keras.PartialDistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LR)), ValueError,
            "Keras optimizers")

    def tape_training(fn=None, local_layers=None, **kwargs):
        shared, local = make_layers()
        variables = shared.trainable_weights + local.trainable_weights
        layers = [local] if local_layers is None else local_layers(local)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = model_loss(shared, local, x, y)
            tape = hvd.PartialDistributedGradientTape(
                tape, local_layers=layers, **kwargs)
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(LR * g)

        if fn == "tf.function":
            step = tf.function(step)
        for k in range(STEPS):
            step(*data(k, rank))
        return shared, local

    methods = {}

    def tape_methods():
        """Both tapes have tf.GradientTape's methods and Horovod's, the
        same set eagerly and inside a tf.function (rank 0 reports it, so
        the test compares the Keras flavours)."""
        shared, local = make_layers()
        found = {}

        def wrap_all(where):
            with tf.GradientTape() as tape:
                pass
            found[where + "/DistributedGradientTape"] = \
                hvd.DistributedGradientTape(tape)
            found[where + "/PartialDistributedGradientTape"] = \
                hvd.PartialDistributedGradientTape(tape, local_layers=[local])
        wrap_all("eager")
        tf.function(lambda: wrap_all("tf.function") or tf.constant(0))()
        want = sorted(set(public_methods(tf.GradientTape))
                      | HOROVOD_TAPE_METHODS)
        for where, tape in found.items():
            check(isinstance(tape, tf.GradientTape) and
                  type(tape).__name__ == "GradientTape",
                  "%s is a %s" % (where, type(tape)))
            got = public_methods(tape)
            check(got == want, "%s methods %s, expected %s" % (
                where, got, want))
            params = list(inspect.signature(
                tape.get_local_and_global_gradients).parameters)
            check(params == GRADIENT_PARAMS,
                  "%s get_local_and_global_gradients parameters %s" % (
                      where, params))
        methods["tape_methods"] = want

    def tape_split_case(fn=None):
        """Training with get_local_and_global_gradients: the local pairs'
        gradients are the rank's own (scaled), the global ones averaged."""
        shared, local = make_layers()
        variables = shared.trainable_weights + local.trainable_weights

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = model_loss(shared, local, x, y)
            tape = hvd.PartialDistributedGradientTape(tape,
                                                      local_layers=[local])
            local_pairs, shared_pairs = split_pairs(
                tape, loss, variables, local.trainable_weights)
            for v, g in local_pairs + shared_pairs:
                v.assign_sub(LR * g)

        if fn == "tf.function":
            step = tf.function(step)
        for k in range(STEPS):
            step(*data(k, rank))
        check_against_simulation(shared, local)

    def tape_split_no_local():
        """DistributedGradientTape's split: nothing local, every gradient
        the mean over ranks (a persistent tape, asked twice as Horovod's
        test does: gradient() first)."""
        shared, local = make_layers()
        variables = shared.trainable_weights + local.trainable_weights
        x, y = data(0, rank)
        with tf.GradientTape(persistent=True) as tape:
            loss = model_loss(shared, local, x, y)
        tape = hvd.DistributedGradientTape(tape)
        first = tape.gradient(loss, variables)
        local_pairs, shared_pairs = split_pairs(tape, loss, variables, [])
        check(local_pairs == [], "local pairs %s" % local_pairs)
        per_rank = [sim_grads(initial_weights(), *data(0, r))
                    for r in range(size)]
        expected = [np.mean([g[i] for g in per_rank], axis=0)
                    for i in range(len(variables))]
        for i, ((_, g), g_first) in enumerate(zip(shared_pairs, first)):
            close(np.asarray(g), expected[i], "gradient %d" % i,
                  rtol=1e-4, atol=1e-6)
            close(np.asarray(g), np.asarray(g_first),
                  "gradient %d against gradient()" % i, rtol=0, atol=0)

    def tape_case(fn=None, scale=True, op_sum=False, local_layers=None):
        kwargs = {"scale_local_gradients": scale}
        if op_sum:
            kwargs["op"] = hvd.Sum
        shared, local = tape_training(fn, local_layers, **kwargs)
        check_against_simulation(shared, local, scale_local=scale,
                                 op_sum=op_sum)

    def optimizer_case(fn=None, scale=True, bpps=1, register=False):
        shared, local = make_layers()
        variables = shared.trainable_weights + local.trainable_weights
        if register:
            opt = hvd_keras.DistributedOptimizer(
                keras.optimizers.SGD(LR), scale_local_gradients=scale)
            for v in local.trainable_weights:
                opt.register_local_var(v)
        else:
            opt = hvd_keras.PartialDistributedOptimizer(
                keras.optimizers.SGD(LR), local_layers=[local],
                scale_local_gradients=scale, backward_passes_per_step=bpps)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = model_loss(shared, local, x, y)
            opt.apply_gradients(zip(tape.gradient(loss, variables),
                                    variables))

        if fn == "tf.function":
            step = tf.function(step)
        steps = STEPS if bpps == 1 else 2 * bpps
        for k in range(steps):
            step(*data(k, rank))
        check_against_simulation(shared, local, scale_local=scale,
                                 steps=steps, bpps=bpps)

    def optimizer_fit():
        shared, local = make_layers()
        model = keras.Sequential([keras.Input((4,)), shared, local])
        opt = hvd_keras.PartialDistributedOptimizer(
            keras.optimizers.SGD(LR), local_layers=local)
        model.compile(optimizer=opt, loss="mse", jit_compile=False)
        x = np.concatenate([data(k, rank)[0] for k in range(STEPS)])
        y = np.concatenate([data(k, rank)[1] for k in range(STEPS)])
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        check_against_simulation(shared, local)

    table = {
        "signatures": signatures,
        "errors": errors,
        "tape_eager": lambda: tape_case(),
        "tape_tf_function": lambda: tape_case("tf.function"),
        "tape_unscaled": lambda: tape_case("tf.function", scale=False),
        "tape_single_layer": lambda: tape_case(local_layers=lambda l: l),
        # Horovod divides local gradients by size() whatever the op.
        "tape_op_sum": lambda: tape_case(op_sum=True),
        "tape_methods": tape_methods,
        "tape_split_eager": lambda: tape_split_case(),
        "tape_split_tf_function": lambda: tape_split_case("tf.function"),
        "tape_split_no_local": tape_split_no_local,
        "optimizer_apply_eager": lambda: optimizer_case(),
        "optimizer_apply_tf_function": lambda: optimizer_case("tf.function"),
        "optimizer_unscaled": lambda: optimizer_case(scale=False),
        "optimizer_fit": optimizer_fit,
        "optimizer_bpps2": lambda: optimizer_case("tf.function", bpps=2),
        "register_local_var": lambda: optimizer_case(register=True),
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__,
            "tape_methods": methods.get("tape_methods")})
    hvd.shutdown()


if __name__ == "__main__":
    main()
