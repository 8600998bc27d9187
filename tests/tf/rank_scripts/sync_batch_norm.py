"""hvd.SyncBatchNormalization cases, with Keras 3 by default or tf_keras
when TF_USE_LEGACY_KERAS=1.

Every rank regenerates every rank's rank-seeded batch (the batch sizes
differ per rank in most cases), runs plain BatchNormalization of the same
Keras on the concatenation in-process, and checks that its own
SyncBatchNormalization gives the same outputs (its rows), moving mean and
variance, input gradients (its rows) and gamma/beta gradients (summed
over the ranks: each rank holds its share). Run by
tests/tf/test_sync_batch_norm.py under hbrun.
"""
import numpy as np

from train_common import run_table  # noqa: E402
from train_common import (CaseFailure, Checker, check, close, expect_raises,
                          identical_on_all_ranks, rank_values, report, tf)

import hbcore  # noqa: E402
import hbcore_tf as hvd  # noqa: E402
import hbcore_tf.keras as hvd_keras  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
LEGACY = _compat.use_legacy_keras()

CASES = [
    "class_and_fused", "config_roundtrip", "eager_equal_batches",
    "eager_unequal_batches", "tf_function_unequal", "images_channels_last",
    "images_channels_first", "empty_rank", "large_mean", "mask",
    "inference_uses_moving_stats", "one_allreduce_per_call", "fit",
]
CHANNELS = 4
MOMENTUM = 0.5
TOL = dict(rtol=1e-4, atol=2e-5)


def equal_rows(r):
    return 4


def unequal_rows(r):
    return 2 + 3 * r


def batches(seed, size, rows, tail, offset=0.0):
    """Every rank's batch (rank-seeded; any rank can compute any rank's)."""
    return [rank_values(seed, r, (rows(r),) + tail) * 3.0 + offset
            for r in range(size)]


def bn_kwargs(axis=-1):
    kwargs = dict(axis=axis, momentum=MOMENTUM, epsilon=1e-3)
    return kwargs


def plain_bn(axis=-1):
    kwargs = bn_kwargs(axis)
    if LEGACY:
        kwargs["fused"] = False  # the reference uses tf_keras' exact path
    return keras.layers.BatchNormalization(**kwargs)


def set_same_weights(layers, channels, seed):
    """gamma, beta, moving mean, moving variance: identical on every rank
    and in the reference."""
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(0.5, 1.5, channels).astype(np.float32),
               rng.uniform(-0.5, 0.5, channels).astype(np.float32),
               rng.uniform(-0.2, 0.2, channels).astype(np.float32),
               rng.uniform(0.8, 1.2, channels).astype(np.float32)]
    for layer in layers:
        layer.set_weights(weights)


def rows_of(rank, counts):
    start = int(sum(counts[:rank]))
    return slice(start, start + int(counts[rank]))


def compare_training_call(seed, rows, tail=(CHANNELS,), axis=-1,
                          fn=None, steps=1, offset=0.0, mask_fn=None):
    """Runs ``steps`` training calls of SyncBatchNormalization on this
    rank's batch and of BatchNormalization on the concatenated batch, and
    compares everything the brief names."""
    rank, size = hvd.rank(), hvd.size()
    channels = tail[axis - 1] if axis > 0 else tail[axis]
    sync = hvd.SyncBatchNormalization(**bn_kwargs(axis))
    ref = plain_bn(axis)
    shape = (None,) + tail
    sync.build(shape)
    ref.build(shape)
    set_same_weights([sync, ref], channels, seed + 1)
    counts = [rows(r) for r in range(size)]
    mine = rows_of(rank, counts)
    checks = Deferred()
    for step in range(steps):
        xs = batches(seed + 10 * step, size, rows, tail, offset)
        ups = batches(seed + 10 * step + 5, size, rows, tail)
        x_all = np.concatenate(xs)
        up_all = np.concatenate(ups)
        masks = None
        if mask_fn is not None:
            masks = [mask_fn(r, xs[r].shape[:-1]) for r in range(size)]

        def sync_step(x, up, mask):
            with tf.GradientTape() as tape:
                tape.watch(x)
                kwargs = {} if mask is None else {"mask": mask}
                y = sync(x, training=True, **kwargs)
                loss = tf.reduce_sum(y * up)
            gx, gg, gb = tape.gradient(loss, [x, sync.gamma, sync.beta])
            return y, gx, gg, gb

        if fn == "tf.function":
            sync_step = tf.function(sync_step)
        mask_mine = None if masks is None else tf.constant(masks[rank])
        y, gx, gg, gb = sync_step(tf.constant(xs[rank]),
                                  tf.constant(ups[rank]), mask_mine)

        x_ref = tf.constant(x_all)
        with tf.GradientTape() as tape:
            tape.watch(x_ref)
            kwargs = {} if masks is None else {
                "mask": tf.constant(np.concatenate(masks))}
            y_ref = ref(x_ref, training=True, **kwargs)
            loss_ref = tf.reduce_sum(y_ref * up_all)
        gx_ref, gg_ref, gb_ref = tape.gradient(
            loss_ref, [x_ref, ref.gamma, ref.beta])

        what = "step %d: " % step
        shares = hbcore.allgather_object([np.asarray(gg), np.asarray(gb)])
        checks.add(y, y_ref.numpy()[mine], what + "outputs")
        checks.add(gx, gx_ref.numpy()[mine], what + "input gradient")
        checks.add(sum(s[0] for s in shares), gg_ref, what + "gamma gradient")
        checks.add(sum(s[1] for s in shares), gb_ref, what + "beta gradient")
        checks.add(sync.moving_mean, np.asarray(ref.moving_mean),
                   what + "moving mean")
        checks.add(sync.moving_variance, np.asarray(ref.moving_variance),
                   what + "moving variance")
    identical_on_all_ranks([np.asarray(sync.moving_mean),
                            np.asarray(sync.moving_variance)],
                           "moving statistics")
    checks.raise_any()
    return sync, ref


class Deferred:
    """Comparisons collected while a case still issues collectives and
    raised at its end: a rank that failed early would otherwise skip the
    collectives its peers wait in."""

    def __init__(self):
        self.failures = []

    def add(self, actual, expected, what):
        try:
            close(actual, expected, what, **TOL)
        except CaseFailure as exc:
            self.failures.append(str(exc))

    def raise_any(self):
        if self.failures:
            raise CaseFailure("; ".join(self.failures))


def collectives_of(layer, training):
    """The HbcoreCollective ops of one traced call of ``layer`` (traced
    only: nothing runs)."""
    graph = tf.function(lambda x: layer(x, training=training)
                        ).get_concrete_function(
        tf.TensorSpec([None, CHANNELS], tf.float32)).graph
    return [op for op in graph.get_operations()
            if op.type == "HbcoreCollective"]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)

    def class_and_fused():
        cls = hvd.SyncBatchNormalization
        check(cls is hvd_keras.SyncBatchNormalization,
              "hbcore_tf.keras.SyncBatchNormalization is another class")
        check(issubclass(cls, keras.layers.BatchNormalization),
              "not a %s BatchNormalization" % keras.__name__)
        check(cls.__name__ == "SyncBatchNormalization", cls.__name__)
        layer = cls()
        check(layer.name.startswith("sync_batch_normalization"), layer.name)
        cls(fused=False)
        for fused in (True, None):
            expect_raises(lambda f=fused: cls(fused=f), ValueError,
                          "SyncBatchNormalization does not support "
                          "fused=True.")

    def config_roundtrip():
        layer = hvd.SyncBatchNormalization(momentum=0.7, epsilon=0.01,
                                           name="sbn")
        again = type(layer).from_config(layer.get_config())
        check(type(again) is type(layer), type(again).__name__)
        check(again.momentum == layer.momentum and again.epsilon == 0.01,
              "config lost values: %s" % again.get_config())
        ser = keras.layers.serialize(layer)
        back = keras.layers.deserialize(ser)
        check(type(back) is type(layer),
              "deserialized as %s" % type(back).__name__)

    def empty_rank():
        # The last rank has no rows: it contributes nothing but still runs
        # the collective (and its gradients are empty).
        compare_training_call(
            700, lambda r: 0 if r == size - 1 else 3 + r, fn="tf.function")

    def mask():
        def mask_fn(r, shape):
            rng = np.random.default_rng([800, r])
            m = rng.uniform(size=shape) < 0.7
            m[:, 0] = True  # every rank has some unmasked rows
            return m

        compare_training_call(810, lambda r: 2 + r, tail=(3, CHANNELS),
                              mask_fn=mask_fn)

    def inference_uses_moving_stats():
        sync, ref = compare_training_call(900, unequal_rows)
        x = rank_values(910, rank, (unequal_rows(rank), CHANNELS))
        close(sync(tf.constant(x), training=False),
              ref(tf.constant(x), training=False).numpy(), "inference", **TOL)
        # Inference builds no collective.
        check(collectives_of(sync, training=False) == [],
              "inference issues a collective")

    def one_allreduce_per_call():
        collectives = collectives_of(hvd.SyncBatchNormalization(),
                                     training=True)
        check(len(collectives) == 1,
              "%d HbcoreCollective ops in a forward call" % len(collectives))
        check(len(collectives[0].inputs) == 2,  # one tensor + its names
              "the collective carries %d tensors" % (
                  len(collectives[0].inputs) - 1))

    def fit():
        # Equal per-rank batches: the mean loss of the concatenated batch
        # equals the average of the ranks' mean losses.
        batch, steps = 4, 2

        def make():
            return [keras.layers.Dense(3, use_bias=False),
                    hvd.SyncBatchNormalization(**bn_kwargs()),
                    keras.layers.Dense(1)]

        def ref_layers():
            return [keras.layers.Dense(3, use_bias=False), plain_bn(),
                    keras.layers.Dense(1)]

        layers, reference = make(), ref_layers()
        model = keras.Sequential([keras.Input((CHANNELS,))] + layers)
        ref_model = keras.Sequential([keras.Input((CHANNELS,))] + reference)
        rng = np.random.default_rng(1000)
        init = [rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                for w in ref_model.get_weights()]
        init[1] = np.abs(init[1]) + 0.5          # gamma
        init[4] = np.abs(init[4]) + 0.5          # moving variance
        model.set_weights(init)
        ref_model.set_weights(init)
        lr = 0.1
        model.compile(optimizer=hvd_keras.DistributedOptimizer(
            keras.optimizers.SGD(lr)), loss="mse", jit_compile=False)
        xs = batches(1010, size, lambda r: batch * steps, (CHANNELS,))
        ys = [x.sum(axis=1, keepdims=True) * 0.3 for x in xs]
        model.fit(xs[rank], ys[rank], batch_size=batch, epochs=1,
                  shuffle=False, verbose=0)

        # The reference: one plain SGD step per global batch (the ranks'
        # k-th batches concatenated), loss = mean over the global batch.
        variables = ref_model.trainable_variables
        for k in range(steps):
            part = slice(k * batch, (k + 1) * batch)
            x = tf.constant(np.concatenate([x[part] for x in xs]))
            y = tf.constant(np.concatenate([y[part] for y in ys]))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(ref_model(x, training=True)
                                                - y))
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(lr * g)
        got = [np.asarray(w) for w in model.get_weights()]
        identical_on_all_ranks(got, "weights after fit")
        for i, (a, b) in enumerate(zip(got, ref_model.get_weights())):
            close(a, b, "weight %d after fit" % i, **TOL)

    table = {
        "class_and_fused": class_and_fused,
        "config_roundtrip": config_roundtrip,
        "eager_equal_batches": lambda: compare_training_call(100, equal_rows),
        "eager_unequal_batches": lambda: compare_training_call(
            200, unequal_rows, steps=2),
        "tf_function_unequal": lambda: compare_training_call(
            300, unequal_rows, fn="tf.function", steps=2),
        "images_channels_last": lambda: compare_training_call(
            400, unequal_rows, tail=(3, 2, CHANNELS), fn="tf.function"),
        "images_channels_first": lambda: compare_training_call(
            500, unequal_rows, tail=(CHANNELS, 3, 2), axis=1),
        "empty_rank": empty_rank,
        # |mean| >> stddev: the float64 combination keeps the variance.
        "large_mean": lambda: compare_training_call(
            600, unequal_rows, offset=50.0, fn="tf.function"),
        "mask": mask,
        "inference_uses_moving_stats": inference_uses_moving_stats,
        "one_allreduce_per_call": one_allreduce_per_call,
        "fit": fit,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hvd.shutdown()


if __name__ == "__main__":
    main()
