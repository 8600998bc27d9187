"""tf_keras legacy optimizers' ``get_gradients(loss, params)`` under
hbcore's DistributedOptimizer (Horovod 0.28.1's horovod/_keras overrides it
to return allreduced gradients). Run by
tests/tf/test_keras_legacy_get_gradients.py at 2 and 3 ranks with
TF_USE_LEGACY_KERAS=1, once per mode (first argument):

- ``graph``: eager execution disabled (a tf.compat.v1 graph and session),
  as tf_keras' v1 model.fit, which calls get_updates -> get_gradients ->
  apply_gradients;
- ``function``: get_gradients and apply_gradients inside a tf.function.

Every rank has its own data (rank_values); the expected gradients are
computed with numpy for every rank independently and then averaged or
summed. Applying what get_gradients returned must not reduce it again:
one SGD step must move the weights by lr times the reduced gradient (with
op=Sum a second reduction would multiply it by the size).

Cases:
- average: op=Average (default): the mean of the ranks' gradients; one
  apply_gradients (graph mode: through get_updates) moves the weights by
  lr times that mean.
- sum: op=Sum: the sum; one step moves the weights by lr times the sum.
- sparse_as_dense: an embedding gather's IndexedSlices gradient comes back
  as a dense tensor equal to the mean of the ranks' dense gradients.
- process_set: with process_set=[0, 2] (at 2 ranks [1], as [0, 1] is
  the global set) the members get the mean of the members' gradients;
  other ranks are not members and build nothing.
- predivide_fp16: gradient_predivide_factor=2 with fp16 compression: still
  the mean (within fp16 precision).
- passes_2: backward_passes_per_step=2. The first pass returns this rank's
  own gradients and leaves the weights alone; the second returns the mean
  over ranks of the two passes' sum (Horovod's default: aggregates are
  not averaged over passes) and applies it once (graph mode: the
  get_updates op run twice).
"""
import sys
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import tensorflow as tf

MODE = sys.argv[1] if len(sys.argv) > 1 else "graph"
if MODE == "graph":
    tf.compat.v1.disable_eager_execution()

from train_common import run_table  # noqa: E402
from train_common import (Checker, check, close, rank_values,  # noqa: E402
                          report)
from train_common import env_size  # noqa: E402

import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()
CASES = ["average", "sum", "sparse_as_dense", "process_set",
         "predivide_fp16", "passes_2"]
ROWS, IN, OUT = 5, 3, 2
LR = 0.5
W0 = np.arange(IN * OUT, dtype=np.float32).reshape(IN, OUT) / 10.0
B0 = np.array([0.1, -0.2], np.float32)
VOCAB, DIM = 6, 2
E0 = np.arange(VOCAB * DIM, dtype=np.float32).reshape(VOCAB, DIM) / 7.0


def dense_data(rank: int) -> Tuple[np.ndarray, np.ndarray]:
    return (rank_values(11, rank, (ROWS, IN)),
            rank_values(12, rank, (ROWS, OUT)))


def dense_grads(rank: int) -> List[np.ndarray]:
    """numpy gradients of mean((x @ W0 + B0 - y) ** 2) for W and b."""
    x, y = (a.astype(np.float64) for a in dense_data(rank))
    residual = x @ W0 + B0 - y
    scale = 2.0 / residual.size
    return [scale * x.T @ residual, scale * residual.sum(axis=0)]


def embedding_ids(rank: int) -> np.ndarray:
    return np.array([rank % VOCAB, (rank + 2) % VOCAB, 1], np.int32)


def embedding_grad(rank: int) -> np.ndarray:
    """numpy gradient of sum(gather(E0, ids) * 1.5 * (rank + 1)), dense."""
    grad = np.zeros((VOCAB, DIM))
    for i in embedding_ids(rank):
        grad[i] += 1.5 * (rank + 1)
    return grad


def reduce_over(ranks: List[int], fn: Callable[[int], Any], op: str) -> Any:
    values = [fn(r) for r in ranks]
    if isinstance(values[0], list):
        return [reduce_over(ranks, lambda r, i=i: fn(r)[i], op)
                for i in range(len(values[0]))]
    stacked = np.stack(values)
    return stacked.sum(axis=0) if op == "sum" else stacked.mean(axis=0)


class Runner:
    """Builds and runs the same computation in a v1 graph (session) or in
    a tf.function."""

    def __init__(self) -> None:
        self.graph = tf.Graph() if MODE == "graph" else None

    def run(self, build: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
        """``build`` creates variables outside and returns a function that
        builds the ops; returns their values (the dict's keys)."""
        if MODE == "graph":
            with self.graph.as_default():
                step = build()
                fetches = step()
                with tf.compat.v1.Session(graph=self.graph) as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    return _run_in_order(sess, fetches)
        step = build()
        first = tf.function(lambda: {k: v for k, v in step().items()
                                     if not k.startswith("after")})
        out = {k: v.numpy() for k, v in first().items()}
        return out


def _run_in_order(sess: Any, fetches: Dict[str, Any]) -> Dict[str, Any]:
    """Runs the gradients, then the update, then reads the variables."""
    out = {}
    grads = {k: v for k, v in fetches.items() if k.startswith("grad")}
    out.update(sess.run(grads))
    if "update" in fetches:
        sess.run(fetches["update"])
    after = {k: v for k, v in fetches.items() if k.startswith("after")}
    out.update(sess.run(after))
    return out


def dense_case(rank: int, ranks: List[int], op: Any, op_name: str,
               **kwargs: Any) -> None:
    """get_gradients of the dense model equal the reduced numpy gradients;
    applying them once moves the weights by LR times them."""
    x_np, y_np = dense_data(rank)
    holder: Dict[str, Any] = {}

    def build():
        w = tf.Variable(W0, name="w")
        b = tf.Variable(B0, name="b")
        opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(LR),
                                       op=op, **kwargs)
        check(type(opt).__name__ == "SGD", "wrapper class %s"
              % type(opt).__name__)
        holder.update(w=w, b=b, opt=opt)

        def step():
            loss = tf.reduce_mean(tf.square(
                tf.matmul(tf.constant(x_np), w) + b - tf.constant(y_np)))
            if MODE == "graph":
                grads = opt.get_gradients(loss, [w, b])
                update = opt.get_updates(loss, [w, b])[0]
                return {"grad_w": grads[0], "grad_b": grads[1],
                        "update": update, "after_w": w.read_value(),
                        "after_b": b.read_value()}
            grads = opt.get_gradients(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return {"grad_w": grads[0], "grad_b": grads[1]}

        return step

    out = Runner().run(build)
    want = reduce_over(ranks, dense_grads, op_name)
    close(out["grad_w"], want[0], "get_gradients kernel (%s)" % op_name,
          rtol=1e-4, atol=1e-5)
    close(out["grad_b"], want[1], "get_gradients bias (%s)" % op_name,
          rtol=1e-4, atol=1e-5)
    if MODE == "graph":
        after_w, after_b = out["after_w"], out["after_b"]
    else:
        after_w, after_b = holder["w"].numpy(), holder["b"].numpy()
    # One SGD step with the get_gradients result: reducing it again (a
    # second allreduce in apply_gradients) would scale a sum by size.
    close(after_w, W0 - LR * want[0], "kernel after one step (%s)" % op_name,
          rtol=1e-4, atol=1e-5)
    close(after_b, B0 - LR * want[1], "bias after one step (%s)" % op_name,
          rtol=1e-4, atol=1e-5)


def two_passes_case(rank: int, size: int) -> None:
    """backward_passes_per_step=2 through get_gradients: two passes at the
    same weights, one update by LR times the reduced sum of both."""
    x_np, y_np = dense_data(rank)
    w = b = None
    if MODE == "graph":
        graph = tf.Graph()
        with graph.as_default():
            w = tf.Variable(W0, name="w")
            b = tf.Variable(B0, name="b")
            opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(LR),
                                           backward_passes_per_step=2)
            loss = tf.reduce_mean(tf.square(
                tf.matmul(tf.constant(x_np), w) + b - tf.constant(y_np)))
            update = opt.get_updates(loss, [w, b])[0]
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run([tf.compat.v1.global_variables_initializer(),
                          tf.compat.v1.local_variables_initializer()])
                passes = []
                for _ in range(2):
                    sess.run(update)
                    passes.append(sess.run([w, b]))
                    passes[-1].append(None)
    else:
        w = tf.Variable(W0, name="w")
        b = tf.Variable(B0, name="b")
        opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(LR),
                                       backward_passes_per_step=2)

        @tf.function
        def step():
            loss = tf.reduce_mean(tf.square(
                tf.matmul(tf.constant(x_np), w) + b - tf.constant(y_np)))
            grads = opt.get_gradients(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return grads

        passes = []
        for _ in range(2):
            grads = step()
            passes.append([w.numpy(), b.numpy(), [g.numpy() for g in grads]])
    own = dense_grads(rank)
    want = reduce_over(list(range(size)),
                       lambda r: [2 * g for g in dense_grads(r)], "mean")
    close(passes[0][0], W0, "kernel after the first pass (no update)")
    close(passes[0][1], B0, "bias after the first pass (no update)")
    close(passes[1][0], W0 - LR * want[0], "kernel after the second pass",
          rtol=1e-4, atol=1e-5)
    close(passes[1][1], B0 - LR * want[1], "bias after the second pass",
          rtol=1e-4, atol=1e-5)
    if MODE != "graph":
        close(passes[0][2][0], own[0], "first pass: this rank's gradient",
              rtol=1e-4, atol=1e-5)
        close(passes[1][2][0], want[0], "second pass: the reduced sum",
              rtol=1e-4, atol=1e-5)


def main() -> None:
    ps = hvd.ProcessSet([1] if env_size() == 2 else [0, 2])
    hvd.init(process_sets=[ps])
    rank, size = hvd.rank(), hvd.size()
    checker = Checker(rank)
    check(keras.__name__ == "tf_keras", "needs TF_USE_LEGACY_KERAS=1")
    check(tf.executing_eagerly() == (MODE != "graph"), "mode %s" % MODE)

    def average() -> None:
        dense_case(rank, list(range(size)), hvd.Average, "mean")

    def sum_() -> None:
        dense_case(rank, list(range(size)), hvd.Sum, "sum")

    def sparse_as_dense() -> None:
        ids = embedding_ids(rank)

        def build():
            table = tf.Variable(E0, name="table")
            opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(LR),
                                           sparse_as_dense=True)

            def step():
                rows = tf.gather(table, tf.constant(ids))
                loss = tf.reduce_sum(rows * (1.5 * (rank + 1)))
                grad = opt.get_gradients(loss, [table])[0]
                check(not isinstance(grad, tf.IndexedSlices),
                      "sparse_as_dense gave %s" % type(grad).__name__)
                return {"grad": tf.convert_to_tensor(grad)}

            return step

        out = Runner().run(build)
        close(out["grad"], reduce_over(list(range(size)), embedding_grad,
                                       "mean"), "sparse_as_dense gradient")

    def process_set() -> None:
        if rank not in ps.ranks:
            return  # not a member: builds no collective on the set
        dense_case(rank, list(ps.ranks), hvd.Average, "mean",
                   process_set=ps)

    def predivide_fp16() -> None:
        x_np, y_np = dense_data(rank)

        def build():
            w = tf.Variable(W0, name="w")
            b = tf.Variable(B0, name="b")
            opt = hvd.DistributedOptimizer(
                keras.optimizers.legacy.SGD(LR), gradient_predivide_factor=2.0,
                compression=hvd.Compression.fp16)

            def step():
                loss = tf.reduce_mean(tf.square(
                    tf.matmul(tf.constant(x_np), w) + b - tf.constant(y_np)))
                grads = opt.get_gradients(loss, [w, b])
                return {"grad_w": grads[0], "grad_b": grads[1]}

            return step

        out = Runner().run(build)
        want = reduce_over(list(range(size)), dense_grads, "mean")
        close(out["grad_w"], want[0], "fp16 predivided kernel", rtol=2e-3,
              atol=2e-3)
        close(out["grad_b"], want[1], "fp16 predivided bias", rtol=2e-3,
              atol=2e-3)

    run_table(checker, {"average": average, "sum": sum_,
                        "sparse_as_dense": sparse_as_dense,
                        "process_set": process_set,
                        "predivide_fp16": predivide_fp16,
                        "passes_2": lambda: two_passes_case(rank, size)},
              CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok, "mode": MODE})
    hvd.shutdown()


if __name__ == "__main__":
    main()
