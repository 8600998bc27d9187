"""DistributedOptimizer cases for Keras 3 and tf.compat.v1 optimizers.

Every rank applies rank-seeded gradients; the expected variables come from
numpy (the mean, or sum, of every rank's gradients, recomputed locally).
Run by tests/tf/test_optimizers.py under hbrun.
"""
import warnings

import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, expect_raises,
                          mean_over_ranks, rank_values, report, tf)

import keras  # noqa: E402

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.compression import Compression  # noqa: E402

SHAPES = [(3, 4), (4,), (2, 2, 2)]
CASES = [
    "keras3/class_and_config", "keras3/apply_eager", "keras3/apply_tf_function",
    "keras3/none_gradient", "keras3/op_sum", "keras3/predivide",
    "keras3/fp16", "keras3/num_groups", "keras3/groups_list",
    "keras3/sparse", "keras3/sparse_as_dense", "keras3/bpps",
    "keras3/bpps_average_tf_function", "keras3/local_var", "keras3/adam_state",
    "errors", "bucket_cap_mb",
    "v1/graph_minimize", "v1/graph_compute_gradients", "v1/graph_momentum_bpps",
    "v1/eager_minimize", "v1/slots_delegate", "v1/groups_arguments",
    "v1/num_groups_and_groups", "keras3/num_groups_and_groups",
    "v1/bpps_compute_transform_apply", "v1/eager_momentum_bpps",
    "keras3/bpps_none_on_update_pass", "v1/eager_bpps_none_on_update_pass",
    "v1/eager_minimize_bpps_none_on_update_pass",
]


def grads(seed, rank):
    return [rank_values(seed + i, rank, s) for i, s in enumerate(SHAPES)]


def zeros_vars():
    return [tf.Variable(np.zeros(s, np.float32)) for s in SHAPES]


def expected_mean(seed, size, scale=1.0):
    return [mean_over_ranks(lambda r, i=i: grads(seed, r)[i], size) * scale
            for i in range(len(SHAPES))]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def sgd(**kwargs):
        return hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), **kwargs)

    def apply_once(opt, seed, variables=None, fn=None):
        variables = variables or zeros_vars()
        g = [tf.constant(x) for x in grads(seed, rank)]
        call = lambda: opt.apply_gradients(zip(g, variables))  # noqa: E731
        (tf.function(call) if fn == "tf.function" else call)()
        return variables

    def class_and_config():
        plain = keras.optimizers.SGD(0.3, momentum=0.5, nesterov=True)
        opt = hvd.DistributedOptimizer(plain)
        cls = type(opt)
        check(cls.__name__ == "SGD", "class name %s" % cls.__name__)
        check(cls.__module__ == keras.optimizers.SGD.__module__,
              "module %s" % cls.__module__)
        check(isinstance(opt, keras.optimizers.SGD), "not an SGD")
        check(opt.get_config() == plain.get_config(),
              "config differs: %s vs %s" % (opt.get_config(),
                                            plain.get_config()))
        again = cls.from_config(opt.get_config())
        check(type(again) is cls and hasattr(again, "_hb_runtime"),
              "from_config lost the wrapper")
        ser = keras.optimizers.serialize(opt)
        check(ser["class_name"] == "SGD", "serialized as %s" % ser)
        plain_again = keras.optimizers.deserialize(ser)
        check(not hasattr(plain_again, "_hb_runtime"),
              "plain deserialize returned a distributed optimizer")

    def apply_eager():
        variables = apply_once(sgd(), 10)
        for v, e in zip(variables, expected_mean(10, size)):
            close(v, -e, "variable")

    def apply_tf_function():
        variables = apply_once(sgd(), 20, fn="tf.function")
        for v, e in zip(variables, expected_mean(20, size)):
            close(v, -e, "variable")

    def none_gradient():
        opt = sgd()
        variables = zeros_vars()
        g = [tf.constant(x) for x in grads(25, rank)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.apply_gradients([(g[0], variables[0]), (None, variables[1]),
                                 (g[2], variables[2])])
        exp = expected_mean(25, size)
        close(variables[0], -exp[0], "v0")
        close(variables[1], np.zeros(SHAPES[1]), "v1 (no gradient)")
        close(variables[2], -exp[2], "v2")

    def op_sum():
        variables = apply_once(sgd(op=hvd.Sum), 30)
        for v, e in zip(variables, expected_mean(30, size, scale=size)):
            close(v, -e, "variable")

    def predivide():
        variables = apply_once(sgd(gradient_predivide_factor=4.0), 40)
        for v, e in zip(variables, expected_mean(40, size)):
            close(v, -e, "variable")

    def fp16():
        variables = apply_once(sgd(compression=Compression.fp16), 50)
        for v, e in zip(variables, expected_mean(50, size)):
            check(v.dtype == tf.float32, "dtype %s" % v.dtype)
            close(v, -e, "variable", rtol=2e-3, atol=2e-3)

    def num_groups():
        variables = apply_once(sgd(num_groups=2), 60, fn="tf.function")
        for v, e in zip(variables, expected_mean(60, size)):
            close(v, -e, "variable")

    def groups_list():
        variables = zeros_vars()
        opt = sgd(groups=[[variables[0], variables[2]]])
        apply_once(opt, 70, variables)
        for v, e in zip(variables, expected_mean(70, size)):
            close(v, -e, "variable")

    def sparse(as_dense):
        table = tf.Variable(np.zeros((6, 3), np.float32))
        opt = sgd(sparse_as_dense=as_dense)

        def rows(r):
            return np.array([r % 6, (r + 2) % 6, 5], np.int64)

        g = tf.IndexedSlices(tf.constant(rank_values(80, rank, (3, 3))),
                             tf.constant(rows(rank)), tf.constant([6, 3],
                                                                 tf.int64))
        opt.apply_gradients([(g, table)])
        expected = np.zeros((6, 3))
        for r in range(size):
            np.add.at(expected, rows(r), rank_values(80, r, (3, 3)))
        close(table, -expected / size, "table")

    def bpps():
        opt = sgd(backward_passes_per_step=3)
        variables = zeros_vars()
        for k in range(3):
            apply_once(opt, 100 + k, variables)
            if k < 2:
                for v in variables:
                    close(v, np.zeros(v.shape), "before update %d" % k)
        check(int(opt.iterations.numpy()) == 3,
              "iterations %s" % opt.iterations.numpy())
        for i, v in enumerate(variables):
            total = sum(expected_mean(100 + k, size)[i] for k in range(3))
            close(v, -total, "variable %d" % i)

    def bpps_average_tf_function():
        opt = sgd(backward_passes_per_step=2,
                  average_aggregated_gradients=True)
        variables = zeros_vars()

        @tf.function
        def step(g):
            opt.apply_gradients(zip(g, variables))

        for k in range(4):
            step([tf.constant(x) for x in grads(110 + k, rank)])
        for i, v in enumerate(variables):
            total = sum(expected_mean(110 + k, size)[i] for k in range(4))
            close(v, -total / 2, "variable %d" % i)

    def local_var():
        variables = zeros_vars()
        opt = sgd()
        opt.register_local_var(variables[1])
        apply_once(opt, 120, variables)
        exp = expected_mean(120, size)
        close(variables[0], -exp[0], "v0")
        close(variables[1], -grads(120, rank)[1] / size, "v1 (local)")
        close(variables[2], -exp[2], "v2")

    def adam_state():
        dist = hvd.DistributedOptimizer(keras.optimizers.Adam(0.05))
        ref = keras.optimizers.Adam(0.05)
        dist_vars, ref_vars = zeros_vars(), zeros_vars()
        for k in range(4):
            g = [tf.constant(x) for x in grads(130 + k, rank)]
            dist.apply_gradients(zip(g, dist_vars))
            mean = [tf.constant(e, tf.float32)
                    for e in expected_mean(130 + k, size)]
            ref.apply_gradients(zip(mean, ref_vars))
        for a, b in zip(dist_vars, ref_vars):
            close(a, b.numpy(), "Adam variable", rtol=1e-4, atol=1e-5)

    def errors():
        plain = keras.optimizers.SGD(0.1)
        expect_raises(lambda: hvd.DistributedOptimizer(plain, op=hvd.Adasum),
                      NotImplementedError, "adasum")
        expect_raises(lambda: hvd.DistributedOptimizer(
            plain, op=hvd.Sum, gradient_predivide_factor=2.0), ValueError,
            "gradient_predivide_factor")
        expect_raises(lambda: hvd.DistributedOptimizer(
            plain, backward_passes_per_step=0), ValueError,
            "backward_passes_per_step")
        expect_raises(lambda: hvd.DistributedOptimizer(plain, groups=-1),
                      ValueError, "groups")
        expect_raises(lambda: hvd.DistributedOptimizer(object()), ValueError,
                      "optimizer")

    def bucket_cap_mb():
        """After init (smddp scripts always init first) bucket_cap_mb cuts
        the gradients into buckets of at most that size, reverse variable
        order, one collective each. SHAPES take 48, 16 and 32 bytes: 40
        bytes give {2}, {1}, {0}; 60 give {1, 2}, {0}; 100 give one.
        Values are the plain mean. With explicit groups it cannot bucket
        and warns instead."""
        for limit, calls in ((40, 3), (60, 2), (100, 1)):
            mb = limit / 2 ** 20
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with tf.Graph().as_default() as graph:
                    variables = [v1.Variable(np.zeros(s, np.float32))
                                 for s in SHAPES]
                    loss = tf.add_n([tf.reduce_sum(v * g) for v, g in
                                     zip(variables, grads(230, rank))])
                    opt = hvd.DistributedOptimizer(
                        v1.train.GradientDescentOptimizer(1.0),
                        bucket_cap_mb=mb)
                    train = opt.minimize(loss)
                    ops = [o for o in graph.get_operations()
                           if o.type == "HbcoreCollective"]
                    check(len(ops) == calls, "%d collectives for %d "
                          "buckets" % (len(ops), calls))
                    with v1.Session() as sess:
                        sess.run(v1.global_variables_initializer())
                        sess.run(train)
                        values = sess.run(variables)
            check(not [w for w in caught if "bucket_cap_mb" in
                       str(w.message)], "warned although it bucketed")
            for v, e in zip(values, expected_mean(230, size)):
                close(v, -e, "variable")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=2,
                                     bucket_cap_mb=1)
        check([w for w in caught if "bucket_cap_mb" in str(w.message)],
              "no warning for bucket_cap_mb with explicit groups")

    # --- tf.compat.v1 ------------------------------------------------------
    v1 = tf.compat.v1

    def v1_graph_minimize():
        with tf.Graph().as_default():
            variables = [v1.Variable(np.zeros(s, np.float32)) for s in SHAPES]
            loss = tf.add_n([tf.reduce_sum(v * g) for v, g in
                             zip(variables, grads(200, rank))])
            opt = hvd.DistributedOptimizer(
                v1.train.GradientDescentOptimizer(1.0))
            train = opt.minimize(loss)
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                sess.run(train)
                values = sess.run(variables)
        for v, e in zip(values, expected_mean(200, size)):
            close(v, -e, "variable")

    def v1_graph_compute_gradients():
        with tf.Graph().as_default():
            variables = [v1.Variable(np.zeros(s, np.float32)) for s in SHAPES]
            loss = tf.add_n([tf.reduce_sum(v * g) for v, g in
                             zip(variables, grads(210, rank))])
            opt = hvd.DistributedOptimizer(
                v1.train.GradientDescentOptimizer(1.0), op=hvd.Sum)
            pairs = opt.compute_gradients(loss)
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                values = sess.run([g for g, _ in pairs])
        for v, e in zip(values, expected_mean(210, size, scale=size)):
            close(v, e, "gradient")

    def v1_graph_momentum_bpps():
        lr, mom, passes, steps = 0.1, 0.9, 2, 3
        with tf.Graph().as_default():
            var = v1.Variable(np.zeros(SHAPES[0], np.float32))
            step_input = v1.placeholder(tf.float32, SHAPES[0])
            loss = tf.reduce_sum(var * step_input)
            global_step = v1.train.get_or_create_global_step()
            opt = hvd.DistributedOptimizer(
                v1.train.MomentumOptimizer(lr, mom),
                backward_passes_per_step=passes,
                average_aggregated_gradients=True)
            train = opt.minimize(loss, global_step=global_step)
            with v1.Session() as sess:
                sess.run([v1.global_variables_initializer(),
                          v1.local_variables_initializer()])
                for k in range(passes * steps):
                    sess.run(train, {step_input: grads(220 + k, rank)[0]})
                value, gstep = sess.run([var, global_step])
        check(gstep == passes * steps, "global_step %s" % gstep)
        expected, accum = np.zeros(SHAPES[0]), np.zeros(SHAPES[0])
        for s in range(steps):
            g = np.mean([mean_over_ranks(
                lambda r, k=k: grads(220 + k, r)[0], size)
                for k in range(s * passes, (s + 1) * passes)], axis=0)
            accum = mom * accum + g
            expected = expected - lr * accum
        close(value, expected, "variable")

    def v1_eager_minimize():
        variables = zeros_vars()
        g = grads(230, rank)
        opt = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0))
        opt.minimize(lambda: tf.add_n([tf.reduce_sum(v * x) for v, x in
                                       zip(variables, g)]),
                     var_list=variables)
        for v, e in zip(variables, expected_mean(230, size)):
            close(v, -e, "variable")

    def v1_slots_delegate():
        with tf.Graph().as_default():
            var = v1.Variable(np.zeros(SHAPES[1], np.float32), name="w")
            inner = v1.train.MomentumOptimizer(0.1, 0.9)
            opt = hvd.DistributedOptimizer(inner)
            opt.minimize(tf.reduce_sum(var * 2.0))
            check(opt.get_slot_names() == ["momentum"],
                  "slot names %s" % opt.get_slot_names())
            slot = opt.get_slot(var, "momentum")
            check(slot is not None, "no momentum slot")
            check(slot.name.startswith("w/Momentum"), "slot %s" % slot.name)

    def deprecation_records(caught):
        return [w for w in caught
                if issubclass(w.category, DeprecationWarning)]

    def deprecations(caught):
        return [str(w.message) for w in deprecation_records(caught)]

    def v1_groups_arguments():
        """As Horovod 0.28: an integer groups (or num_groups standing for
        it) must be > 0 (ValueError naming groups); num_groups warns
        (DeprecationWarning naming it); groups alone does not."""
        for kwargs in ({"groups": 0}, {"groups": -1}, {"num_groups": -1}):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                err = expect_raises(lambda: hvd.DistributedOptimizer(
                    v1.train.GradientDescentOptimizer(1.0), **kwargs),
                    ValueError, "groups")
            check(repr(list(kwargs.values())[0]) in str(err),
                  "%s: message does not show the value: %s" % (kwargs, err))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0),
                                     num_groups=2)
        found = deprecations(caught)
        check(len(found) == 1 and "num_groups" in found[0],
              "num_groups=2 warned %r" % found)
        where = deprecation_records(caught)[0].filename
        check(where == __file__,
              "the warning points at %s, not the caller" % where)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0),
                                     groups=2)
        check(not deprecations(caught), "groups=2 warned %r"
              % deprecations(caught))

    def v1_num_groups_and_groups():
        """num_groups with groups: a DeprecationWarning, and groups is
        used (as Horovod): one list of all variables is ONE collective,
        where num_groups=3 alone would be three. Values: the mean."""
        for kwargs, calls in (({"num_groups": 3}, 3),
                              ({"num_groups": 3, "groups": "all"}, 1)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with tf.Graph().as_default() as graph:
                    variables = [v1.Variable(np.zeros(s, np.float32))
                                 for s in SHAPES]
                    if kwargs.get("groups") == "all":
                        kwargs = dict(kwargs, groups=[list(variables)])
                    loss = tf.add_n([tf.reduce_sum(v * g) for v, g in
                                     zip(variables, grads(240, rank))])
                    opt = hvd.DistributedOptimizer(
                        v1.train.GradientDescentOptimizer(1.0), **kwargs)
                    train = opt.minimize(loss)
                    ops = [o for o in graph.get_operations()
                           if o.type == "HbcoreCollective"]
                    check(len(ops) == calls, "%s: %d collectives, expected "
                          "%d" % (sorted(kwargs), len(ops), calls))
                    with v1.Session() as sess:
                        sess.run(v1.global_variables_initializer())
                        sess.run(train)
                        values = sess.run(variables)
            found = deprecations(caught)
            check(any("num_groups" in m for m in found),
                  "%s: no DeprecationWarning for num_groups: %r" % (
                      sorted(kwargs), found))
            for v, e in zip(values, expected_mean(240, size)):
                close(v, -e, "variable")

    def keras3_num_groups_and_groups():
        """The Keras 3 wrapper (hbcore_tf and hbcore_tf.keras) takes
        num_groups with groups too: warns, uses groups, averages."""
        import hbcore_tf.keras as hvd_keras
        for factory in (hvd.DistributedOptimizer,
                        hvd_keras.DistributedOptimizer):
            variables = zeros_vars()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opt = factory(keras.optimizers.SGD(1.0), num_groups=3,
                              groups=[[variables[0], variables[2]]])
            found = deprecations(caught)
            check(len(found) == 1 and "num_groups" in found[0],
                  "%s warned %r" % (factory.__module__, found))
            where = deprecation_records(caught)[0].filename
            check(where == __file__, "%s: the warning points at %s" % (
                factory.__module__, where))
            check(opt._hb_runtime.reducer.groups == [[variables[0],
                                                      variables[2]]],
                  "%s: groups %r" % (factory.__module__,
                                     opt._hb_runtime.reducer.groups))
            apply_once(opt, 250, variables)
            for v, e in zip(variables, expected_mean(250, size)):
                close(v, -e, "variable")

    def v1_bpps_compute_transform_apply():
        """backward_passes_per_step=2 with compute_gradients, a transform
        (clip_by_global_norm) and apply_gradients, as Horovod: the N-th
        compute_gradients returns the allreduced aggregate (the others the
        local gradient), so the clip acts on the global aggregate; the
        variable moves on update passes only; global_step on every pass."""
        passes, clip = 2, 0.5
        for average in (False, True):
            with tf.Graph().as_default():
                w = v1.Variable(np.zeros(SHAPES[0], np.float32))
                x = v1.placeholder(tf.float32, SHAPES[0])
                global_step = v1.train.get_or_create_global_step()
                opt = hvd.DistributedOptimizer(
                    v1.train.GradientDescentOptimizer(1.0),
                    backward_passes_per_step=passes,
                    average_aggregated_gradients=average)
                ((grad, _),) = opt.compute_gradients(tf.reduce_sum(w * x))
                (clipped,), _ = tf.clip_by_global_norm([grad], clip)
                train = opt.apply_gradients([(clipped, w)],
                                            global_step=global_step)
                with v1.Session() as sess:
                    sess.run([v1.global_variables_initializer(),
                              v1.local_variables_initializer()])
                    got = []
                    for k in range(2 * passes):
                        _, g = sess.run([train, grad],
                                        {x: grads(260 + k, rank)[0]})
                        got.append((g, sess.run(w)))
                    gstep = sess.run(global_step)
            check(gstep == 2 * passes, "global_step %s" % gstep)
            expected_w = np.zeros(SHAPES[0])
            for k, (g, value) in enumerate(got):
                if k % passes < passes - 1:
                    close(g, grads(260 + k, rank)[0],
                          "pass %d: local gradient" % k)
                else:
                    aggregate = sum(mean_over_ranks(
                        lambda r, j=j: grads(260 + j, r)[0], size)
                        for j in range(k - passes + 1, k + 1))
                    if average:
                        aggregate = aggregate / passes
                    close(g, aggregate, "pass %d: reduced aggregate" % k)
                    norm = np.linalg.norm(aggregate)
                    expected_w = expected_w - aggregate * min(
                        1.0, clip / norm)
                close(value, expected_w, "pass %d: variable (average=%s)"
                      % (k, average))

    def v1_eager_momentum_bpps():
        """Eager tf.compat.v1 minimize with backward_passes_per_step=2:
        Momentum on the reduced sum of every 2 passes."""
        lr, mom, passes, steps = 0.1, 0.9, 2, 3
        var = tf.Variable(np.zeros(SHAPES[1], np.float32))
        opt = hvd.DistributedOptimizer(v1.train.MomentumOptimizer(lr, mom),
                                       backward_passes_per_step=passes)
        for k in range(passes * steps):
            x = tf.constant(grads(270 + k, rank)[1])
            opt.minimize(lambda: tf.reduce_sum(var * x), var_list=[var])
        expected, accum = np.zeros(SHAPES[1]), np.zeros(SHAPES[1])
        for s_ in range(steps):
            g = sum(mean_over_ranks(lambda r, k=k: grads(270 + k, r)[1], size)
                    for k in range(s_ * passes, (s_ + 1) * passes))
            accum = mom * accum + g
            expected = expected - lr * accum
        close(var, expected, "variable")

    def none_on_update_pass(opt, apply_pass):
        """backward_passes_per_step=2, eager, 4 passes: variable 1 has a
        gradient on passes 0 and 2 only (None on both update passes),
        variable 0 on every pass. Each update applies what was
        accumulated since the last one: variable 1 gets its pass-0 and
        pass-2 gradients (one each update), not nothing, and no pass's
        gradient twice."""
        variables = zeros_vars()[:2]
        seeds = [300 + k for k in range(4)]
        for k, seed in enumerate(seeds):
            g = grads(seed, rank)
            apply_pass(opt, variables, [g[0], g[1] if k % 2 == 0 else None])
            # After each update pass: the sums of the passes so far.
            if k % 2 == 1:
                done = seeds[:k + 1]
                exp0 = sum(expected_mean(s, size)[0] for s in done)
                exp1 = sum(expected_mean(s, size)[1] for s in done[::2])
                close(variables[0], -exp0, "variable 0 after pass %d" % k)
                close(variables[1], -exp1, "variable 1 after pass %d" % k)

    def apply_pairs(opt, variables, values):
        pairs = [(None if x is None else tf.constant(x), v)
                 for x, v in zip(values, variables)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.apply_gradients(pairs)

    def minimize_pass(opt, variables, values):
        xs = [None if x is None else tf.constant(x) for x in values]

        def loss():  # d loss / d variables[i] = xs[i]; None: unconnected
            return tf.add_n([tf.reduce_sum(v * x)
                             for v, x in zip(variables, xs) if x is not None])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.minimize(loss, var_list=variables)

    table = {
        "keras3/class_and_config": class_and_config,
        "keras3/apply_eager": apply_eager,
        "keras3/apply_tf_function": apply_tf_function,
        "keras3/none_gradient": none_gradient,
        "keras3/op_sum": op_sum,
        "keras3/predivide": predivide,
        "keras3/fp16": fp16,
        "keras3/num_groups": num_groups,
        "keras3/groups_list": groups_list,
        "keras3/sparse": lambda: sparse(False),
        "keras3/sparse_as_dense": lambda: sparse(True),
        "keras3/bpps": bpps,
        "keras3/bpps_average_tf_function": bpps_average_tf_function,
        "keras3/local_var": local_var,
        "keras3/adam_state": adam_state,
        "errors": errors,
        "bucket_cap_mb": bucket_cap_mb,
        "v1/graph_minimize": v1_graph_minimize,
        "v1/graph_compute_gradients": v1_graph_compute_gradients,
        "v1/graph_momentum_bpps": v1_graph_momentum_bpps,
        "v1/eager_minimize": v1_eager_minimize,
        "v1/slots_delegate": v1_slots_delegate,
        "v1/groups_arguments": v1_groups_arguments,
        "v1/num_groups_and_groups": v1_num_groups_and_groups,
        "keras3/num_groups_and_groups": keras3_num_groups_and_groups,
        "v1/bpps_compute_transform_apply": v1_bpps_compute_transform_apply,
        "v1/eager_momentum_bpps": v1_eager_momentum_bpps,
        "keras3/bpps_none_on_update_pass": lambda: none_on_update_pass(
            sgd(backward_passes_per_step=2), apply_pairs),
        "v1/eager_bpps_none_on_update_pass": lambda: none_on_update_pass(
            hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(1.0),
                                     backward_passes_per_step=2),
            apply_pairs),
        "v1/eager_minimize_bpps_none_on_update_pass":
            lambda: none_on_update_pass(
                hvd.DistributedOptimizer(
                    v1.train.GradientDescentOptimizer(1.0),
                    backward_passes_per_step=2), minimize_pass),
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
