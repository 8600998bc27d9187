"""The TensorFlow checks of benchmarks/gpu_check.py, on one rank (called by
_gpu_check_rank.py after its numpy-API checks).

Each rank makes only its own GPU (``local_rank % GPUs``, the one hbcore's
numpy checks used) visible to TensorFlow, with memory growth, so two ranks
on one GPU do not fight over its memory. Then, on that GPU:

- the collective cases of _gpu_check_rank.collective_cases through
  ``hbcore_tf`` eagerly, in one ``tf.function`` and in one
  ``tf.compat.v1`` graph run by a Session, each result checked against
  numpy and its device (the op's output device; in the graph, where the
  Session placed every hbcore op) checked to be the GPU: TensorFlow's
  soft placement would otherwise run a CPU kernel without a word;
- Keras ``model.fit`` in ``mixed_float16`` with
  ``hvd.DistributedOptimizer(SGD)``: ranks start from different weights
  and see different data; after the broadcast callback and training,
  every rank must hold the same float32 weights, changed by training;
- ``hb.keras.layers.ShardedEmbedding``: a lookup against numpy's
  ``table[ids]``, and one SGD step of ``model.fit`` against the update
  single-process SGD on the whole batch makes (computed in numpy).

Where TensorFlow sees no GPU these are NOT RUN, or with ``--tf-on-cpu``
run on the CPU (which tests the checks, not the GPU kernels). Where ranks
share a GPU, an eager GPU allreduce must fail with hbcore's refusal
(tf.errors.UnimplementedError) and the rest is N/A.
"""
from typing import Any, Callable, List, Tuple

import numpy as np

import hbcore as hb
from _gpu_check_rank import (NA, NOT_RUN, SHARED_GPU_TEXT, CheckFailed,
                             Context, check_case, collective_cases, compare,
                             rank_data, ranks_text, tensor_name)

SECTIONS = ["TF eager", "TF tf.function", "Keras mixed_float16",
            "ShardedEmbedding", "TF v1 graph"]
HBCORE_OPS = ("HbcoreCollective", "HbcoreAlltoall")


def _no_gpu_reason(tf: Any) -> str:
    if not tf.test.is_built_with_cuda():
        return ("TensorFlow %s sees no GPU: it is built without CUDA "
                "(tensorflow-cpu); install tensorflow[and-cuda]"
                % tf.__version__)
    return ("TensorFlow %s (built with CUDA) sees no GPU: check the driver "
            "and CUDA_VISIBLE_DEVICES" % tf.__version__)


def tensorflow_sections(ctx: Context) -> None:
    """Runs every TensorFlow section on this rank's GPU (or records why
    not), in the same order on every rank."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        mine = gpus[max(ctx.device, 0) % len(gpus)]
        tf.config.set_visible_devices([mine], "GPU")
        tf.config.experimental.set_memory_growth(mine, True)
    import hbcore_tf as hvd
    hvd.init()
    report = ctx.report
    if not gpus or ctx.cuda is None:
        why = _no_gpu_reason(tf) if not gpus else ctx.no_gpu
        if not ctx.tf_on_cpu:
            for section in SECTIONS:
                report.add(section, "every check of the section", "-",
                           NOT_RUN, why)
            return
        report.add("TensorFlow", "TF GPU kernels", "-", NOT_RUN,
                   why + " (--tf-on-cpu: the TF checks ran on the CPU)")
        _run_sections(ctx, tf, hvd, "/CPU:0", "CPU")
        return
    if ctx.shared:
        _refusal(ctx, tf, hvd)
        for section in SECTIONS:
            report.add(section, "every check of the section",
                       "GPU %d" % ctx.device, NA,
                       "%s share one GPU: see the refusal check"
                       % ranks_text(ctx.sharing))
        return
    _run_sections(ctx, tf, hvd, "/GPU:0", "GPU")


def _run_sections(ctx: Context, tf: Any, hvd: Any, device: str,
                  kind: str) -> None:
    label = "GPU %d" % ctx.device if kind == "GPU" else "CPU"
    cases = collective_cases(ctx.rank, ctx.size, ctx.large_elements)

    def on_device(tensor: Any) -> np.ndarray:
        if not tensor.device.endswith(kind + ":0"):
            raise CheckFailed("the result is on %s, not the %s (TensorFlow "
                              "ran a CPU kernel?)" % (tensor.device, kind))
        return tensor.numpy()

    for case in cases:
        def eager(case=case) -> str:
            with tf.device(device):
                xs = [tf.constant(x) for x in case.inputs]
                outs = case.call(hvd, xs, tensor_name("gpu_check/eager",
                                                      case.name))
            return check_case(case, outs, on_device)
        ctx.report.run("TF eager", case.name, label, eager)

    _function_section(ctx, tf, hvd, cases, device, label, on_device)
    ctx.report.run("Keras mixed_float16",
                   "fit, DistributedOptimizer(SGD): same weights on all "
                   "ranks", label,
                   lambda: _keras_mixed_precision(ctx, tf, device, kind))
    lookup, step = _sharded_embedding(ctx, tf, device, kind)
    ctx.report.run("ShardedEmbedding", "lookup vs numpy table[ids]", label,
                   lookup)
    ctx.report.run("ShardedEmbedding", "one SGD step vs numpy", label, step)
    _graph_section(ctx, tf, hvd, cases, device, kind, label)


def _refusal(ctx: Context, tf: Any, hvd: Any) -> None:
    def refused() -> str:
        with tf.device("/GPU:0"):
            x = tf.ones([4])
            try:
                hvd.allreduce(x, op=hvd.Sum, name="gpu_check/tf_shared")
            except tf.errors.UnimplementedError as exc:
                text = exc.message
                want = [ranks_text(ctx.sharing) + " are on the same GPU",
                        SHARED_GPU_TEXT]
                missing = [w for w in want if w not in text]
                if missing:
                    raise CheckFailed("UnimplementedError lacks %r: %s" % (
                        missing, text))
                return "UnimplementedError: " + text
        raise CheckFailed("a TF GPU allreduce of ranks on one GPU succeeded")
    ctx.report.run("two ranks on one GPU", "TF GPU allreduce refused",
                   "GPU %d" % ctx.device, refused)


def _function_section(ctx: Context, tf: Any, hvd: Any, cases: List[Any],
                      device: str, label: str,
                      on_device: Callable[[Any], np.ndarray]) -> None:
    """Every case in ONE tf.function (the collectives run in whatever
    order TF picks, as a training step's do), inputs passed as arguments
    (no large constants in the graph)."""
    section = "TF tf.function"
    counts = [len(c.inputs) for c in cases]

    @tf.function(autograph=False)  # plain Python: nothing to convert
    def step(*tensors: Any) -> List[List[Any]]:
        outs, i = [], 0
        with tf.device(device):
            for case, n in zip(cases, counts):
                outs.append(case.call(hvd, list(tensors[i:i + n]),
                                      tensor_name("gpu_check/fn", case.name)))
                i += n
        return outs

    try:
        with tf.device(device):
            inputs = [tf.constant(x) for c in cases for x in c.inputs]
        results = step(*inputs)
    except Exception as exc:  # noqa: BLE001 - every case fails with it
        for case in cases:
            ctx.report.add(section, case.name, label, "FAIL",
                           "the tf.function failed: %s: %s" % (
                               type(exc).__name__, str(exc)[:600]))
        return
    for case, outs in zip(cases, results):
        ctx.report.run(section, case.name, label,
                       lambda case=case, outs=outs: check_case(
                           case, outs, on_device))


def _graph_section(ctx: Context, tf: Any, hvd: Any, cases: List[Any],
                   device: str, kind: str, label: str) -> None:
    """Every case in one tf.compat.v1 graph, fed through placeholders and
    run by one Session.run; the Session's partition graphs say where each
    hbcore op ran."""
    section = "TF v1 graph"
    v1 = tf.compat.v1
    graph = tf.Graph()
    try:
        with graph.as_default(), tf.device(device):
            holders = [[v1.placeholder(x.dtype, x.shape) for x in c.inputs]
                       for c in cases]
            outs = [c.call(hvd, h, tensor_name("gpu_check/graph", c.name))
                    for c, h in zip(cases, holders)]
        feed = {h: x for c, hs in zip(cases, holders)
                for h, x in zip(hs, c.inputs)}
        options = v1.RunOptions(output_partition_graphs=True)
        metadata = v1.RunMetadata()
        # Soft placement, as GPU training scripts set it: the ops around
        # the collectives (string constants of their names) have no GPU
        # kernel; where the hbcore ops ran is checked below.
        config = v1.ConfigProto(allow_soft_placement=True)
        with v1.Session(graph=graph, config=config) as session:
            results = session.run(outs, feed_dict=feed, options=options,
                                  run_metadata=metadata)
    except Exception as exc:  # noqa: BLE001 - every case fails with it
        for case in cases:
            ctx.report.add(section, case.name, label, "FAIL",
                           "the graph failed: %s: %s" % (type(exc).__name__,
                                                         str(exc)[:600]))
        return
    for case, got in zip(cases, results):
        ctx.report.run(section, case.name, label,
                       lambda case=case, got=got: check_case(
                           case, got, np.asarray))

    def placement() -> str:
        placed = [(n.name, n.device) for g in metadata.partition_graphs
                  for n in g.node if n.op in HBCORE_OPS]
        elsewhere = [p for p in placed if not p[1].endswith(kind + ":0")]
        if len(placed) < len(cases) or elsewhere:
            raise CheckFailed("%d hbcore ops placed (want >= %d); not on "
                              "the %s: %s" % (len(placed), len(cases), kind,
                                              elsewhere[:3]))
        return "%d hbcore ops, all on %s" % (len(placed), placed[0][1])
    ctx.report.run(section, "every hbcore op placed on the %s" % kind,
                   label, placement)


def _keras_module() -> Any:
    from hbcore_tf._base import compat
    return compat.keras_module()


def _variable_device(variable: Any) -> str:
    """A Keras 3 variable's TF variable device (tf_keras: its own)."""
    return getattr(variable, "value", variable).device


def _keras_mixed_precision(ctx: Context, tf: Any, device: str,
                           kind: str) -> str:
    import hbcore_tf as hvd
    import hbcore_tf.keras as hvd_keras
    keras = _keras_module()
    x = rank_data(60, ctx.rank, (64, 8), np.float32) / 8
    y = rank_data(61, ctx.rank, (64, 1), np.float32) / 8
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with tf.device(device):
            keras.utils.set_random_seed(100 + ctx.rank)  # ranks start apart
            model = keras.Sequential([
                keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, dtype="float32")])
            model.compile(optimizer=hvd.DistributedOptimizer(
                keras.optimizers.SGD(0.05)), loss="mse")
            start = model.get_weights()
            history = model.fit(
                x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
                callbacks=[
                    hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    weights = model.get_weights()
    every = hb.allgather_object(weights)
    root_start = hb.broadcast_object(start, 0)
    if model.layers[0].compute_dtype != "float16":
        raise CheckFailed("Dense computes in %s, not float16"
                          % model.layers[0].compute_dtype)
    if any(w.dtype != np.float32 for w in weights):
        raise CheckFailed("weights are %s, not float32"
                          % [w.dtype.name for w in weights])
    where = _variable_device(model.trainable_variables[0])
    if not where.endswith(kind + ":0"):
        raise CheckFailed("the first kernel lives on %s, not the %s"
                          % (where, kind))
    spread = max(float(np.max(np.abs(a - b))) for other in every
                 for a, b in zip(weights, other))
    if spread != 0.0:
        raise CheckFailed("weights differ across ranks by up to %.3g"
                          % spread)
    moved = max(float(np.max(np.abs(a - b)))
                for a, b in zip(weights, root_start))
    loss = history.history["loss"]
    if not (moved > 0 and np.all(np.isfinite(loss))):
        raise CheckFailed("training moved the weights by %.3g; losses %s"
                          % (moved, loss))
    return ("float16 compute, float32 weights on %s; max|w_r - w_0| 0 "
            "across %d ranks; moved %.3g from rank 0's start; loss %.4g"
            % (where.rsplit("/", 1)[-1], ctx.size, moved, loss[-1]))


def _sharded_embedding(ctx: Context, tf: Any, device: str, kind: str
                       ) -> Tuple[Callable[[], str], Callable[[], str]]:
    """Builds and trains a ShardedEmbedding model once; returns the two
    checks (lookup, SGD step) to run on what it did."""
    import hbcore_tf as hb_tf
    keras = _keras_module()
    size, rank = ctx.size, ctx.rank
    rows, dim, per_example, batch, lr = 4 * size + 3, 8, 3, 4, 0.5
    table = rank_data(70, 0, (rows, dim), np.float32) / 8
    kernel = rank_data(71, 0, (per_example * dim, 1), np.float32) / 8
    ids = [np.random.default_rng([72, r]).integers(
        0, rows, size=(batch, per_example)) for r in range(size)]
    for r in range(size):
        ids[r][1, 0] = ids[r][0, 0]  # a duplicate id in every batch
    ys = [rank_data(73, r, (batch, 1), np.float32) / 8 for r in range(size)]
    outcome = {}
    try:
        with tf.device(device), hb_tf.scope():
            emb = hb_tf.keras.layers.ShardedEmbedding(
                rows, dim, embeddings_initializer=keras.initializers.Constant(
                    table), name="gpu_check_emb")
            inp = keras.Input((per_example,), dtype="int64")
            out = keras.layers.Dense(
                1, use_bias=False, trainable=False,
                kernel_initializer=keras.initializers.Constant(kernel))(
                    keras.layers.Flatten()(emb(inp)))
            model = keras.Model(inp, out)
            looked_up = emb(tf.constant(ids[rank]))
            outcome["lookup"] = (looked_up.device, looked_up.numpy())
            model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse")
            model.fit(ids[rank], ys[rank], batch_size=batch, epochs=1,
                      shuffle=False, verbose=0)
        outcome["table"] = emb.full_table()
    except Exception as exc:  # noqa: BLE001 - reported by both checks
        outcome["error"] = "%s: %s" % (type(exc).__name__, str(exc)[:600])

    def lookup() -> str:
        if "lookup" not in outcome:
            raise CheckFailed(outcome["error"])
        where, got = outcome["lookup"]
        if not where.endswith(kind + ":0"):
            raise CheckFailed("the lookup's rows are on %s, not the %s"
                              % (where, kind))
        return compare(got, table[ids[rank]], 0.0) + " (on %s)" % (
            where.rsplit("/", 1)[-1])

    def sgd_step() -> str:
        if "table" not in outcome:
            raise CheckFailed(outcome.get("error", "no table"))
        # Single-process SGD on the whole batch (every rank's examples):
        # loss = mean over examples of (sum_j table[id_j] . k_j - y)^2.
        all_ids, all_y = np.concatenate(ids), np.concatenate(ys)
        k = kernel.reshape(per_example, dim)
        err = np.einsum("efd,fd->e", table[all_ids], k) - all_y[:, 0]
        grad = np.zeros_like(table)
        for e in range(len(all_ids)):
            for j in range(per_example):
                grad[all_ids[e, j]] += 2.0 / len(all_ids) * err[e] * k[j]
        return compare(outcome["table"], table - lr * grad, 1e-5)
    return lookup, sgd_step
