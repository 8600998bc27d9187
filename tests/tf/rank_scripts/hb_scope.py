"""hb.scope, @hb.function, hb.wraps and hb.train cases (HybridBackend API),
with Keras 3 by default or tf_keras when TF_USE_LEGACY_KERAS=1.

Every rank starts from DIFFERENT initial values (seeded by its rank), so
the broadcast from rank 0 is part of what is tested. The expected values
come from plain single-process TensorFlow (no hbcore, no scope) trained
on the whole batch of every step (the concatenation of every rank's batch,
rank order) from rank 0's initial values: with equal batch sizes the mean
loss of the whole batch has the mean of the ranks' gradients.
The v1 cases do not depend on the Keras flavour and run in the Keras 3
launch only (V1_CASES). Run by tests/tf/test_hb_scope.py under hbrun.
"""
import contextlib
import os
import tempfile

import numpy as np

from train_common import (Checker, check, close, expect_raises,
                          identical_on_all_ranks, rank_values, report,
                          run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402
from hbcore_tf._parallel import data_parallel as _data_parallel  # noqa: E402
from hbcore_tf._base.options import options  # noqa: E402

keras = _compat.keras_module()

V1_CASES = ["v1_hb_adagrad_checkpoint", "v1_plain_optimizer_in_scope",
            "mts_arguments", "v1_eager",
            "hb_train_optimizers", "wraps_v1", "v1_splat_initial_values",
            "function_decorator"]
KERAS_CASES = ["keras_fit", "keras_fit_nbuckets", "keras_fit_empty_batch",
               "keras_subclassed_model", "keras_custom_loop",
               "keras_custom_loop_eager",
               "wraps_keras", "patches_removed"]
CASES = V1_CASES + KERAS_CASES
STEPS = 3
BATCH = 4
LR = 0.1
SHAPES = [(4, 3), (3,), (3, 1), (1,)]
NAMES = ["w1", "b1", "w2", "b2"]
V1 = tf.compat.v1


def init_values(rank, seed=10):
    """Rank ``rank``'s initial [w1, b1, w2, b2]; ranks differ."""
    return [0.6 * rank_values(seed + i, rank, s) for i, s in enumerate(SHAPES)]


def batch(step, rank):
    return (rank_values(100 + step, rank, (BATCH, 4)),
            rank_values(200 + step, rank, (BATCH, 1)))


def whole_batch(step, size):
    xs, ys = zip(*[batch(step, r) for r in range(size)])
    return np.concatenate(xs), np.concatenate(ys)


def forward(ws, x):
    return tf.matmul(tf.tanh(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def mse(ws, x, y):
    return tf.reduce_mean(tf.square(forward(ws, x) - y))


# --- tf.compat.v1 -------------------------------------------------------------

def v1_model(init, seen=False):
    """Variables with rank-dependent initializers, placeholders, loss."""
    ws = [V1.get_variable(n, initializer=tf.constant(v))
          for n, v in zip(NAMES, init)]
    x = V1.placeholder(tf.float32, (None, 4))
    y = V1.placeholder(tf.float32, (None, 1))
    return ws, x, y, mse(ws, x, y)


def v1_expected(make_opt, size, steps=STEPS):
    """Plain TF v1 (no hbcore) on the whole batch from rank 0's init."""
    with tf.Graph().as_default():
        ws, x, y, loss = v1_model(init_values(0))
        step = V1.train.get_or_create_global_step()
        train = make_opt().minimize(loss, global_step=step)
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k in range(steps):
                bx, by = whole_batch(k, size)
                sess.run(train, {x: bx, y: by})
            return sess.run(ws)


def count_collectives(graph):
    return sum(1 for op in graph.get_operations()
               if op.type == "HbcoreCollective"
               and _data_parallel.REDUCER_NAME in op.name)


def raw_run(sess, fetches):
    """Runs ``fetches`` without the session's hooks (whose summary ops
    would need the placeholders fed)."""
    return sess.run_step_fn(lambda step_context: step_context.session.run(fetches))


class CountingListener(V1.train.CheckpointSaverListener):
    def __init__(self):
        self.saves = 0

    def after_save(self, session, global_step_value):
        self.saves += 1


def main():
    rank = hb.context.rank          # no init(): the context does it
    size = hb.context.world_size
    checker = Checker(rank)
    skip = V1_CASES if _compat.use_legacy_keras() else []

    # -- v1 ---------------------------------------------------------------
    def v1_hb_adagrad_checkpoint():
        ckpt = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_scope_") if rank == 0 else None, 0)
        listener = CountingListener()
        hb.context.add_saving_listener("counting", listener)
        losses = []
        with tf.Graph().as_default():
            with hb.scope():
                ws, x, y, loss = v1_model(init_values(rank))
                V1.summary.scalar("loss", loss)
                step = V1.train.get_or_create_global_step()
                # Slots differ by rank too: the broadcast must cover them.
                opt = hb.train.AdagradOptimizer(
                    LR, initial_accumulator_value=0.1 + 0.2 * rank)
                train = opt.minimize(loss, global_step=step)
            with hb.train.MonitoredTrainingSession(
                    hb.train.Server().target, checkpoint_dir=ckpt,
                    save_checkpoint_steps=STEPS, save_summaries_steps=1,
                    log_step_count_steps=None) as sess:
                for k in range(STEPS):
                    _, value = sess.run([train, loss],
                                        dict(zip((x, y), batch(k, rank))))
                    losses.append(float(value))
                got = raw_run(sess, ws)
        check(isinstance(opt, V1.train.AdagradOptimizer), "not an Adagrad")
        identical_on_all_ranks(got, "weights")
        expected = v1_expected(lambda: V1.train.AdagradOptimizer(
            LR, initial_accumulator_value=0.1), size)  # rank 0's slots
        for n, a, b in zip(NAMES, got, expected):
            close(a, b, n, rtol=1e-4, atol=1e-5)
        # Checkpoints: rank 0's saver only (its listener fired), summaries
        # from rank 0 only (STEPS loss values, each rank 0's own loss).
        saves = hbcore.allgather_object(listener.saves)
        check(saves[0] >= 1 and all(s == 0 for s in saves[1:]),
              "checkpoint saves per rank %s" % saves)
        hbcore.barrier()
        check(V1.train.latest_checkpoint(ckpt).endswith("-%d" % STEPS),
              "latest checkpoint %s" % V1.train.latest_checkpoint(ckpt))
        if rank == 0:
            logged = []
            for name in sorted(os.listdir(ckpt)):
                if name.startswith("events.out"):
                    for event in V1.train.summary_iterator(
                            os.path.join(ckpt, name)):
                        logged += [v.simple_value for v in event.summary.value
                                   if v.tag == "loss"]
            close(np.array(logged), np.array(losses), "logged losses",
                  rtol=1e-5)
        # Every rank restores: a local variable copies w1 in local_init_op,
        # which runs after the restore and before the broadcast hook.
        with tf.Graph().as_default():
            with hb.scope():
                ws, x, y, loss = v1_model(init_values(rank, seed=77))
                step = V1.train.get_or_create_global_step()
                hb.train.AdagradOptimizer(LR).minimize(loss, global_step=step)
                seen = V1.get_variable(
                    "seen", SHAPES[0], collections=[V1.GraphKeys.LOCAL_VARIABLES],
                    initializer=V1.zeros_initializer())
            scaffold = V1.train.Scaffold(local_init_op=seen.assign(ws[0]))
            with hb.train.MonitoredTrainingSession(
                    checkpoint_dir=ckpt, scaffold=scaffold,
                    save_checkpoint_secs=None, save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                restored, gstep = raw_run(sess, [seen, step])
        close(restored, expected[0], "w1 restored on rank %d" % rank,
              rtol=1e-4, atol=1e-5)
        check(gstep == STEPS, "global step after restore %d" % gstep)
        hbcore.barrier()

    def v1_splat_initial_values():
        # A 32 MiB table trained by sparse updates with Adagrad (slot from
        # constant_initializer(0.1), a Const) and Momentum (zeros, a Fill).
        # Inside hb.scope such splat initial values are computed by a Fill
        # of a placeholder_with_default (so the session's constant folding
        # cannot keep a copy beside the variable: the memory itself is
        # measured in tests/tf/test_splat_initial_values.py, in fresh
        # processes); the values must be those of plain TF.
        rows, dim, lr = 1 << 21, 4, 0.5
        ids = np.array([3, 17, rows - 1], np.int64)  # same on every rank

        def table_init(shape, dtype=None, partition_info=None):
            # Computed, not a splat: left as it is.
            return tf.random.stateless_uniform(shape, [1, 2], dtype=dtype)

        def initial_value_op(variable):
            return variable.initializer.inputs[1].op

        def train(in_scope):
            with tf.Graph().as_default():
                with hb.scope() if in_scope else contextlib.nullcontext():
                    table = V1.get_variable(
                        "table", initializer=table_init, shape=[rows, dim],
                        use_resource=True)
                    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids))
                    opts = [V1.train.AdagradOptimizer(lr),
                            V1.train.MomentumOptimizer(lr, 0.9)]
                    train_op = tf.group([o.minimize(loss) for o in opts])
                    accum = opts[0].get_slot(table, "accumulator")
                    momentum = opts[1].get_slot(table, "momentum")
                    # Three values, the last repeated (tf.compat.v1's
                    # constant): not one value, must not be rewritten.
                    padded = V1.get_variable(
                        "padded", shape=[1 << 18, 4], use_resource=True,
                        initializer=V1.constant_initializer([1., 2., 3.]))
                rewritten = {
                    name: (op.type == "Fill" and op.inputs[1].op.type ==
                           "PlaceholderWithDefault")
                    for name, op in [("table", initial_value_op(table)),
                                     ("accumulator", initial_value_op(accum)),
                                     ("momentum", initial_value_op(momentum)),
                                     ("padded", initial_value_op(padded))]}
                with V1.Session() as sess:
                    sess.run(V1.global_variables_initializer())
                    for _ in range(2):
                        sess.run(train_op)
                    return rewritten, sess.run([table, accum, momentum,
                                                padded])

        plain_rewritten, expected = train(in_scope=False)
        rewritten, got = train(in_scope=True)
        check(not any(plain_rewritten.values()),
              "outside hb.scope nothing is rewritten: %s" % plain_rewritten)
        check(rewritten == {"table": False, "accumulator": True,
                            "momentum": True, "padded": False},
              "splat initial values rewritten in hb.scope: %s" % rewritten)
        for name, a, b in zip(["table", "accumulator", "momentum",
                               "padded"], got, expected):
            close(a, b, name, rtol=1e-6, atol=0)
        padded = np.full(1 << 20, 3.0, np.float32)
        padded[:3] = [1.0, 2.0, 3.0]
        close(got[3], padded.reshape(1 << 18, 4), "padded", rtol=0, atol=0)
        check(expected[1][0, 0] == np.float32(0.1) and
              expected[1][3, 0] > np.float32(0.1),
              "accumulator rows %s" % expected[1][[0, 3], 0])

    def v1_plain_optimizer_in_scope():
        expected = v1_expected(
            lambda: V1.train.MomentumOptimizer(LR, 0.9), size)
        for nbuckets in (1, 2, 3):
            with tf.Graph().as_default() as graph:
                with hb.scope(grad_nbuckets=nbuckets):
                    ws, x, y, loss = v1_model(init_values(rank))
                    opt = V1.train.MomentumOptimizer(LR, 0.9)
                    train = opt.minimize(loss)
                check(type(opt).__name__ == "MomentumOptimizer" and
                      isinstance(opt, V1.train.MomentumOptimizer),
                      "class %r" % type(opt))
                check(count_collectives(graph) == nbuckets,
                      "grad_nbuckets=%d: %d collectives" % (
                          nbuckets, count_collectives(graph)))
                with hb.train.MonitoredTrainingSession() as sess:
                    for k in range(STEPS):
                        sess.run(train, dict(zip((x, y), batch(k, rank))))
                    got = raw_run(sess, ws)
            for n, a, b in zip(NAMES, got, expected):
                close(a, b, "%s (grad_nbuckets=%d)" % (n, nbuckets),
                      rtol=1e-4, atol=1e-5)
        # Reverse order: the first group holds the last variables.
        plan = _data_parallel.BucketReducer("t", groups=2)._plan(
            [None] * 4, [0, 1, 2, 3])
        check(plan == [[2, 3], [0, 1]], "bucket plan %s" % plan)

    def mts_arguments():
        import inspect

        ours = inspect.signature(hb.train.MonitoredTrainingSession).parameters
        theirs = inspect.signature(V1.train.MonitoredTrainingSession)
        for name, param in theirs.parameters.items():
            check(name in ours, "argument %s missing" % name)
            # TF's USE_DEFAULT sentinel is a bare object(); other defaults
            # must be equal.
            if type(param.default) is not object:
                check(ours[name].default == param.default,
                      "default of %s: %r, TF: %r" % (
                          name, ours[name].default, param.default))
        for name in ("eval_every_n_iter", "eval_fn"):
            check(name in ours and ours[name].default is None, name)
        expect_raises(lambda: hb.train.MonitoredTrainingSession(
            eval_every_n_iter=10), ValueError, "eval_fn")

        class CountingHook(V1.train.SessionRunHook):
            def __init__(self):
                self.begins = 0

            def begin(self):
                self.begins += 1

        hook = CountingHook()
        with tf.Graph().as_default():
            V1.train.get_or_create_global_step()
            with hb.train.MonitoredTrainingSession(
                    chief_only_hooks=[hook]):
                pass
        begins = hbcore.allgather_object(hook.begins)
        check(begins == [1] + [0] * (size - 1),
              "chief_only_hooks begin() per rank: %s" % begins)
        check_eval_wiring()

    def check_eval_wiring():
        """eval_fn adds hbcore_tf.train.evaluation.EvaluationHook with the
        session's arguments (a stub module stands in for the real one,
        which the metrics side tests)."""
        import sys
        import types

        made = []

        class StubHook(V1.train.SessionRunHook):
            def __init__(self, fn, steps=100, every_n_iter=1000,
                         summary_dir=None, history=None):
                made.append((fn, steps, every_n_iter, summary_dir, history))

        stub = types.ModuleType("hbcore_tf.train.evaluation")
        stub.EvaluationHook = StubHook
        name = "hbcore_tf.train.evaluation"
        saved = sys.modules.get(name)
        sys.modules[name] = stub
        history, summaries = [], tempfile.mkdtemp(prefix="hb_eval_")
        try:
            check(hb.train.EvaluationHook is StubHook, "lazy EvaluationHook")
            with tf.Graph().as_default():
                V1.train.get_or_create_global_step()
                with hb.train.MonitoredTrainingSession(
                        eval_fn=len, eval_every_n_iter=7, eval_steps=3,
                        eval_history=history, summary_dir=summaries):
                    pass
        finally:
            if saved is None:
                sys.modules.pop(name)
            else:
                sys.modules[name] = saved
        want = (len, 3, 7, summaries if rank == 0 else None, history)
        check(len(made) == 1 and made[0][:4] == want[:4] and
              made[0][4] is history, "EvaluationHook arguments %s" % made)

    def v1_eager():
        # TF2 eager: a v1 optimizer created in the scope, a variable whose
        # initial value differs by rank (the scope broadcasts rank 0's).
        w0 = [rank_values(6, r, (4, 1)) for r in range(size)]
        with hb.scope():
            w = tf.Variable(w0[rank])
            opt = V1.train.MomentumOptimizer(LR, 0.5)
            for k in range(STEPS):
                x, y = batch(k, rank)
                opt.minimize(lambda: tf.reduce_mean(tf.square(x @ w - y)),
                             var_list=[w])
        want, velocity = w0[0].astype(np.float64), 0.0
        for k in range(STEPS):
            grads = [2.0 / BATCH * batch(k, r)[0].T @ (
                batch(k, r)[0] @ want - batch(k, r)[1]) for r in range(size)]
            velocity = 0.5 * velocity + np.mean(grads, axis=0)
            want = want - LR * velocity
        close(w.numpy(), want, "eager v1 momentum", rtol=1e-4, atol=1e-5)

    def one_step_check(make_hb, make_plain, label, steps=2):
        """``steps`` steps of make_hb() (v1, every rank on its own batch)
        equal the plain optimizer applied to the numpy mean gradient."""
        w0 = rank_values(5, 0, (4, 1))
        data = [batch(k, r) for k in range(steps) for r in range(size)]

        def grad(w, x, y):  # d/dw mean((xw - y)^2)
            return 2.0 / len(x) * x.T.astype(np.float64) @ (x @ w - y)

        with tf.Graph().as_default():
            w = V1.get_variable("w", initializer=tf.constant(w0))
            x = V1.placeholder(tf.float32, (None, 4))
            y = V1.placeholder(tf.float32, (None, 1))
            gs = V1.train.get_or_create_global_step()
            opt = make_hb(gs)
            train = opt.minimize(tf.reduce_mean(tf.square(x @ w - y)),
                                 global_step=gs)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(steps):
                    sess.run(train, dict(zip((x, y), batch(k, rank))))
                got = sess.run(w)
        with tf.Graph().as_default():
            w = V1.get_variable("w", initializer=tf.constant(w0))
            g = V1.placeholder(tf.float32, (4, 1))
            gs = V1.train.get_or_create_global_step()
            apply = make_plain(gs).apply_gradients([(g, w)], global_step=gs)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(steps):
                    cur = sess.run(w)
                    mean = np.mean([grad(cur, *data[k * size + r])
                                    for r in range(size)], axis=0)
                    sess.run(apply, {g: mean})
                want = sess.run(w)
        close(got, want, label, rtol=1e-4, atol=1e-5)
        return opt

    # Constructor arguments beyond the learning rate (gs: global step).
    extra = {"MomentumOptimizer": lambda gs: {"momentum": 0.9},
             "AdagradDAOptimizer": lambda gs: {"global_step": gs}}

    def hb_train_optimizers():
        names = sorted(n for n in dir(V1.train) if n.endswith("Optimizer")
                       and n not in ("Optimizer", "SyncReplicasOptimizer"))
        check(sorted(hb.train.OPTIMIZERS) == names,
              "hb.train optimizers %s, tf.compat.v1.train has %s" % (
                  sorted(hb.train.OPTIMIZERS), names))
        for name in names:
            hb_cls, plain = getattr(hb.train, name), getattr(V1.train, name)
            kw = extra.get(name, lambda gs: {})
            opt = one_step_check(lambda gs: hb_cls(LR, **kw(gs)),
                                 lambda gs: plain(LR, **kw(gs)), name)
            check(isinstance(opt, plain) and type(opt).__name__ == name,
                  "%s is %r" % (name, type(opt)))

    def wraps_v1():
        class HalfStepGD(V1.train.GradientDescentOptimizer):
            def __init__(self, lr):
                super().__init__(lr / 2)

        check(hb.wraps is hb.train.wraps_optimizer, "wraps alias")
        wrapped = hb.wraps(HalfStepGD)
        check(wrapped.__name__ == "HalfStepGD" and
              issubclass(wrapped, HalfStepGD), "wrapped class %r" % wrapped)
        one_step_check(lambda gs: wrapped(LR), lambda gs: HalfStepGD(LR),
                       "hb.wraps(HalfStepGD)")
        expect_raises(lambda: hb.wraps(int), TypeError, "optimizer class")

    def function_decorator():
        @hb.function(grad_nbuckets=3)
        def build():
            check(options.grad_nbuckets == 3, "option inside hb.function")
            return V1.train.GradientDescentOptimizer(LR)

        @hb.function
        def bare():
            return V1.train.GradientDescentOptimizer(LR)

        with tf.Graph().as_default():
            opt = build()
            check(opt._hb_reducer.groups == 3, "groups %r" % (
                opt._hb_reducer.groups,))
            check(getattr(type(bare()), "_hb_distributed", False),
                  "@hb.function without arguments")
        check(options.grad_nbuckets == 1, "option unwound")
        expect_raises(lambda: hb.function(grad_nbucket=2), ValueError,
                      "grad_nbucket")
        # Stacked under tf.function: the scope is active while tracing.
        traced = tf.function(hb.function(grad_nbuckets=2)(
            lambda: tf.constant(options.grad_nbuckets)))
        check(int(traced()) == 2, "hb.function under tf.function")
        one_step_check(lambda gs: build(), lambda gs:
                       V1.train.GradientDescentOptimizer(LR), "hb.function")

    # -- Keras --------------------------------------------------------------
    def keras_model(init):
        layers = [keras.layers.Dense(
            3, activation="tanh",
            kernel_initializer=keras.initializers.Constant(init[0]),
            bias_initializer=keras.initializers.Constant(init[1])),
            keras.layers.Dense(
            1, kernel_initializer=keras.initializers.Constant(init[2]),
            bias_initializer=keras.initializers.Constant(init[3]))]
        return keras.Sequential([keras.Input((4,))] + layers)

    def keras_sgd():
        return keras.optimizers.SGD(LR, momentum=0.9)

    def seed_momentums(model, opt, r):
        """Builds the optimizer and gives its momentum slots rank r's
        values."""
        opt.build(model.trainable_variables)
        for i, m in enumerate(opt.momentums):
            m.assign(0.1 * rank_values(300 + i, r, tuple(m.shape)))

    def keras_expected(momentums=False):
        """Plain Keras, one process, whole batch per step, rank 0's init
        (and rank 0's momentum slots when ``momentums``)."""
        model = keras_model(init_values(0))
        opt = keras_sgd()
        model.compile(optimizer=opt, loss="mse")
        if momentums:
            seed_momentums(model, opt, 0)
        xs, ys = zip(*[whole_batch(k, size) for k in range(STEPS)])
        model.fit(np.concatenate(xs), np.concatenate(ys),
                  batch_size=BATCH * size, epochs=1, shuffle=False, verbose=0)
        return [np.asarray(w) for w in model.get_weights()]

    def fit_case(momentums=False, **scope_options):
        with hb.scope(**scope_options):
            model = keras_model(init_values(rank))
            opt = keras_sgd()
            model.compile(optimizer=opt, loss="mse")
            if momentums:  # fit must broadcast the slots from rank 0
                seed_momentums(model, opt, rank)
            check(getattr(type(model), "_hb_model", False),
                  "model class %r" % type(model))
            check(getattr(type(opt), "_hb_distributed", False) and
                  type(opt).__name__ == "SGD", "optimizer %r" % type(opt))
            xs, ys = zip(*[batch(k, rank) for k in range(STEPS)])
            model.fit(np.concatenate(xs), np.concatenate(ys),
                      batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        got = [np.asarray(w) for w in model.get_weights()]
        identical_on_all_ranks(got, "weights")
        for n, a, b in zip(NAMES, got, keras_expected(momentums)):
            close(a, b, n, rtol=1e-4, atol=1e-5)

    def keras_fit_empty_batch():
        # Ranks > 0 get an empty last batch (as data sync gives a rank out
        # of data): the last step's gradient is rank 0's alone, which is
        # the whole-batch gradient of the examples that exist.
        def batches(r):
            out = [batch(k, r) for k in range(STEPS)]
            if r > 0:
                out[-1] = (np.zeros((0, 4), np.float32),
                           np.zeros((0, 1), np.float32))
            return out

        with hb.scope():
            model = keras_model(init_values(rank))
            model.compile(optimizer=keras_sgd(), loss="mse")
            mine = batches(rank)
            ds = tf.data.Dataset.from_generator(
                lambda: iter(mine), output_signature=(
                    tf.TensorSpec((None, 4), tf.float32),
                    tf.TensorSpec((None, 1), tf.float32)))
            model.fit(ds, epochs=1, verbose=0)
        got = [np.asarray(w) for w in model.get_weights()]
        identical_on_all_ranks(got, "weights")
        plain = keras_model(init_values(0))
        opt = keras_sgd()
        for k in range(STEPS):
            x = np.concatenate([batches(r)[k][0] for r in range(size)])
            y = np.concatenate([batches(r)[k][1] for r in range(size)])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(plain(x) - y))
            grads = tape.gradient(loss, plain.trainable_variables)
            opt.apply_gradients(zip(grads, plain.trainable_variables))
        for n, a, b in zip(NAMES, got, plain.get_weights()):
            close(a, b, n, rtol=1e-4, atol=1e-5)

    def keras_subclassed_model():
        class TwoLayers(keras.Model):
            def __init__(self, init):
                super().__init__()
                self.body = keras_model(init)

            def call(self, x):
                return self.body(x)

        with hb.scope():
            model = TwoLayers(init_values(rank))
            check(isinstance(model, TwoLayers) and
                  type(model).__name__ == "TwoLayers" and
                  getattr(type(model), "_hb_model", False),
                  "subclassed model class %r" % type(model))
            model.compile(optimizer=keras_sgd(), loss="mse")
            xs, ys = zip(*[batch(k, rank) for k in range(STEPS)])
            model.fit(np.concatenate(xs), np.concatenate(ys),
                      batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        got = [np.asarray(w) for w in model.get_weights()]
        identical_on_all_ranks(got, "weights")
        for n, a, b in zip(NAMES, got, keras_expected()):
            close(a, b, n, rtol=1e-4, atol=1e-5)

    def keras_custom_loop(eager=False):
        with hb.scope(grad_nbuckets=2):
            model = keras_model(init_values(rank))
            # Eagerly, tf_keras' legacy optimizer (OptimizerV2) is covered.
            opt = (keras.optimizers.legacy.SGD(LR, momentum=0.9)
                   if eager and _compat.use_legacy_keras() else keras_sgd())
            check(getattr(type(opt), "_hb_distributed", False),
                  "optimizer %r" % type(opt))

            def step(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(model(x) - y))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))

            if not eager:
                step = tf.function(step)
            for k in range(STEPS):
                step(*batch(k, rank))
        if not eager:
            graph = step.get_concrete_function(*batch(0, rank)).graph
            check(count_collectives(graph) == 2, "grad_nbuckets=2: %d "
                  "collectives" % count_collectives(graph))
        got = [np.asarray(w) for w in model.get_weights()]
        identical_on_all_ranks(got, "weights")
        for n, a, b in zip(NAMES, got, keras_expected()):
            close(a, b, n, rtol=1e-4, atol=1e-5)

    def wraps_keras():
        sgd_class = hb.wraps(type(keras_sgd()))
        model = keras_model(init_values(0))  # outside scope: same init
        opt = sgd_class(LR, momentum=0.9)
        check(isinstance(opt, type(keras_sgd())), "wrapped SGD instance")
        for k in range(STEPS):
            x, y = batch(k, rank)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        for n, a, b in zip(NAMES, model.get_weights(), keras_expected()):
            close(a, b, n, rtol=1e-4, atol=1e-5)

    def patches_removed():
        with hb.scope():
            pass
        check(type(V1.train.AdamOptimizer(LR)) is V1.train.AdamOptimizer,
              "v1 optimizer patched after the scope")
        check(not getattr(type(keras_sgd()), "_hb_distributed", False),
              "Keras optimizer patched after the scope")
        check(not getattr(type(keras_model(init_values(0))), "_hb_model",
                          False), "Keras model patched after the scope")
        v = tf.Variable(float(rank))
        check(float(v.numpy()) == float(rank), "variable broadcast outside")

    table = {
        "v1_hb_adagrad_checkpoint": v1_hb_adagrad_checkpoint,
        "v1_plain_optimizer_in_scope": v1_plain_optimizer_in_scope,
        "mts_arguments": mts_arguments,
        "v1_eager": v1_eager,
        "hb_train_optimizers": hb_train_optimizers,
        "wraps_v1": wraps_v1,
        "v1_splat_initial_values": v1_splat_initial_values,
        "function_decorator": function_decorator,
        "keras_fit": lambda: fit_case(momentums=True),
        "keras_fit_nbuckets": lambda: fit_case(grad_nbuckets=3),
        "keras_fit_empty_batch": keras_fit_empty_batch,
        "keras_subclassed_model": keras_subclassed_model,
        "keras_custom_loop": keras_custom_loop,
        "keras_custom_loop_eager": lambda: keras_custom_loop(eager=True),
        "wraps_keras": wraps_keras,
        "patches_removed": patches_removed,
    }
    run_table(checker, table, CASES, skip=skip)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hb.shutdown()


if __name__ == "__main__":
    main()
