"""Horovod-parity cases for hbcore_tf.functions, hbcore_tf.compression and
hvd.SyncBatchNormalization (Keras 3), run under hbrun by
tests/tf/test_tf_functions_audit.py.

- broadcast_object_root_keeps_object: on the root, broadcast_object and
  broadcast_object_fn return the caller's object itself (Horovod returns
  ``obj`` there); the other ranks get an equal copy. Eager and in a
  tf.compat.v1 graph with ``session=``.
- fp16_indexed_slices / fp16_sparse_tensor: Compression.fp16 keeps
  tf.IndexedSlices and tf.SparseTensor as such (values cast to float16 and
  back), eagerly, in a tf.function and in a tf.compat.v1 graph.
- sync_bn_fit_jit_compile: a Keras 3 model holding SyncBatchNormalization,
  compiled with jit_compile=True, trains without XLA (Keras falls back);
  its moving statistics are those of the concatenated uneven batches.

Every case issues its collectives before checking anything, so a failing
check on one rank cannot leave the others waiting.
"""
from typing import Callable, List

import numpy as np

from train_common import (Checker, check, close, rank_values, report,
                          run_table, tf)

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

CASES = [
    "broadcast_object_root_keeps_object",
    "fp16_indexed_slices",
    "fp16_sparse_tensor",
    "sync_bn_fit_jit_compile",
]
CHANNELS = 3


def payload(owner: int) -> dict:
    """A rank's object: a dict, so that identity and equality are both
    observable (a class of this __main__ would travel by value and compare
    unequal)."""
    return {"owner": owner, "items": [owner, "x"]}


def _checks_after(checks: List[Callable[[], None]]) -> None:
    """Runs every deferred check, raising the first failure at the end."""
    errors = []
    for fn in checks:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - collected, re-raised below
            errors.append("%s: %s" % (type(exc).__name__, exc))
    check(not errors, "; ".join(errors))


def broadcast_object_root_keeps_object() -> None:
    rank, size = hvd.rank(), hvd.size()
    root = size - 1
    mine = payload(rank)
    got = hvd.broadcast_object(mine, root_rank=root, name="audit.obj")
    fn = hvd.broadcast_object_fn(root_rank=root, name="audit.fn")
    got_fn = fn(mine)
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        got_v1 = hvd.broadcast_object(mine, root_rank=root, session=sess)
    checks = []
    for what, value in (("eager", got), ("broadcast_object_fn", got_fn),
                        ("v1 session", got_v1)):
        if rank == root:
            checks.append(lambda w=what, v=value: check(
                v is mine, "%s: the root got a copy, not its object" % w))
        else:
            checks.append(lambda w=what, v=value: check(
                v == payload(root) and v is not mine,
                "%s: got %r" % (w, v)))
    _checks_after(checks)


def _slices_values(rank: int) -> np.ndarray:
    # Values exactly representable in float16 (multiples of 1/8).
    return np.round(rank_values(40, rank, (2, CHANNELS)) * 8) / 8


def _slices_roundtrip(values: tf.Tensor, indices: tf.Tensor) -> tuple:
    """Compression.fp16 compress and decompress of IndexedSlices.

    Returns:
        (compressed, restored), both tf.IndexedSlices.

    Raises:
        TypeError: either is not a tf.IndexedSlices.
    """
    fp16 = hvd.Compression.fp16
    slices = tf.IndexedSlices(values, indices,
                              tf.constant([4, CHANNELS], tf.int64))
    compressed, ctx = fp16.compress(slices)
    restored = fp16.decompress(compressed, ctx)
    for part in (compressed, restored):
        if not isinstance(part, tf.IndexedSlices):
            raise TypeError("got %s, not tf.IndexedSlices"
                            % type(part).__name__)
    return compressed, restored


def _check_slices(what: str, dtypes: tuple, parts: tuple,
                  values: np.ndarray) -> None:
    """Checks the dtypes and the (values, indices) of both slices."""
    check(dtypes == (tf.float16, tf.float32), "%s: dtypes %s" % (what,
                                                                 dtypes))
    (c_vals, c_idx), (r_vals, r_idx) = parts
    close(c_vals, values.astype(np.float16), what + " compressed values")
    close(r_vals, values, what + " restored values")
    check(list(np.asarray(c_idx)) == [3, 1] == list(np.asarray(r_idx)),
          "%s: indices %s / %s" % (what, c_idx, r_idx))


def fp16_indexed_slices() -> None:
    values = _slices_values(hvd.rank())
    indices = np.array([3, 1], np.int64)
    runs = []
    eager = _slices_roundtrip(tf.constant(values), tf.constant(indices))
    runs.append(("eager", eager))
    traced = tf.function(_slices_roundtrip)(tf.constant(values),
                                            tf.constant(indices))
    runs.append(("tf.function", traced))
    for what, (c, r) in runs:
        _check_slices(what, (c.dtype, r.dtype),
                      ((c.values, c.indices), (r.values, r.indices)), values)
    graph = tf.Graph()
    with graph.as_default():
        c, r = _slices_roundtrip(tf.constant(values), tf.constant(indices))
        with tf.compat.v1.Session(graph=graph) as sess:
            got = sess.run([c.values, c.indices, r.values, r.indices])
    _check_slices("v1 graph", (c.dtype, r.dtype),
                  ((got[0], got[1]), (got[2], got[3])), values)


def _sparse_roundtrip(dense: tf.Tensor) -> tuple:
    """Compression.fp16 compress and decompress of a SparseTensor.

    Returns:
        (compressed, restored), both tf.SparseTensor.

    Raises:
        TypeError: either is not a tf.SparseTensor.
    """
    fp16 = hvd.Compression.fp16
    compressed, ctx = fp16.compress(tf.sparse.from_dense(dense))
    restored = fp16.decompress(compressed, ctx)
    for part in (compressed, restored):
        if not isinstance(part, tf.SparseTensor):
            raise TypeError("got %s, not tf.SparseTensor"
                            % type(part).__name__)
    return compressed, restored


def _check_sparse(what: str, dtypes: tuple, dense_parts: list,
                  dense: np.ndarray) -> None:
    check(dtypes == (tf.float16, tf.float32), "%s: dtypes %s" % (what,
                                                                 dtypes))
    close(dense_parts[0], dense.astype(np.float16), what + " compressed")
    close(dense_parts[1], dense, what + " restored")


def fp16_sparse_tensor() -> None:
    dense = _slices_values(hvd.rank())
    dense[0, 1] = 0.0
    for what, fn in (("eager", _sparse_roundtrip),
                     ("tf.function", tf.function(_sparse_roundtrip))):
        c, r = fn(tf.constant(dense))
        _check_sparse(what, (c.dtype, r.dtype),
                      [tf.sparse.to_dense(c), tf.sparse.to_dense(r)], dense)
    graph = tf.Graph()
    with graph.as_default():
        c, r = _sparse_roundtrip(tf.constant(dense))
        with tf.compat.v1.Session(graph=graph) as sess:
            got = sess.run([tf.sparse.to_dense(c), tf.sparse.to_dense(r)])
    _check_sparse("v1 graph", (c.dtype, r.dtype), got, dense)


def sync_bn_fit_jit_compile() -> None:
    import hbcore_tf.keras as hvd_keras

    keras = _compat.keras_module()
    rank, size = hvd.rank(), hvd.size()
    rows = [3 + r for r in range(size)]  # uneven batches, one step each
    xs = [rank_values(60, r, (rows[r], CHANNELS)) * 2.0 + r
          for r in range(size)]
    layer = hvd.SyncBatchNormalization(momentum=0.0, epsilon=1e-3)
    model = keras.Sequential([keras.Input((CHANNELS,)), layer])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(0.0)), loss="mse", jit_compile=True)
    model.fit(xs[rank], np.zeros_like(xs[rank]), batch_size=rows[rank],
              epochs=1, shuffle=False, verbose=0)
    x_all = np.concatenate(xs).astype(np.float64)
    check(layer.supports_jit is False, "supports_jit is %r"
          % layer.supports_jit)
    check(model.jit_compile is False, "model.jit_compile is %r"
          % model.jit_compile)
    close(layer.moving_mean, x_all.mean(axis=0), "moving mean",
          rtol=1e-5, atol=1e-5)
    close(layer.moving_variance, x_all.var(axis=0), "moving variance",
          rtol=1e-5, atol=1e-5)


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)
    table = {
        "broadcast_object_root_keeps_object":
            broadcast_object_root_keeps_object,
        "fp16_indexed_slices": fp16_indexed_slices,
        "fp16_sparse_tensor": fp16_sparse_tensor,
        "sync_bn_fit_jit_compile": sync_bn_fit_jit_compile,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hvd.shutdown()


if __name__ == "__main__":
    main()
