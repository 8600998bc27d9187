"""A DLRM-style click model with sharded embedding tables, on Criteo-like
data the script generates.

    hbrun -np 2 python examples/recsys_sharded.py
    hbrun -np 3 python examples/recsys_sharded.py --steps 300

What it shows (HybridBackend's API; only the import differs from a
``hybridbackend.tensorflow`` script):

- 13 dense features and 26 hashed categorical features per example, three
  of them multi-hot (variable-length lists), ids drawn from a power law so
  batches repeat popular ids, clicks from a hidden model;
- ``hb.embedding_scope()``: each of the 26 tables (about 1.6M rows x 16 in
  all) is split over the ranks, every rank holding only its block of rows
  and of the optimizer's slots; ``tf.nn.embedding_lookup`` and
  ``tf.nn.safe_embedding_lookup_sparse`` move ids to the rows' owners and
  rows back (alltoall); the dense layers are data parallel;
- ``hb.train.AdagradOptimizer`` in ``hb.scope()``;
- ``hb.metrics.auc`` over every rank's evaluation rows in an
  ``hb.train.EvaluationHook``;
- ``hb.train.MonitoredTrainingSession``: checkpoints written by rank 0
  (saving sharded tables is collective: every rank takes part), each table
  stored whole, in id order, under its own name;
- ``hb.train.export``: a SavedModel whose lookups are plain gathers on the
  whole tables, loaded and run by plain TensorFlow in a separate process
  (no hbcore), whose predictions must equal the trained model's.

Rank 0 prints the evaluation history and the export check; the script
fails if the final AUC is not clearly better than chance or the exported
model disagrees with the trained one. Without ``--model-dir`` the
checkpoints and the export go to a temporary directory that is removed at
the end (they take about 0.7 GB).
"""
import argparse
import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf

import hbcore
import hbcore_tf as hb
from serving_check import PredictAtEnd, served_difference

v1 = tf.compat.v1
NUM_DENSE = 13
NUM_CATEGORICAL = 26
MULTI_HOT = {23: 3, 24: 4, 25: 6}          # feature -> most ids per example
BUCKETS = [200_000 if i % 4 == 0 else 30_000 if i % 4 == 1 else 5_000
           if i % 4 == 2 else 500 for i in range(NUM_CATEGORICAL)]
DIM = 16
INFORMATIVE = [0, 1, 2, 5, 23]             # features the hidden model uses


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-steps", type=int, default=8)
    parser.add_argument("--model-dir", default=None,
                        help="checkpoints, summaries and the export, kept "
                             "(default: a temporary directory, removed at "
                             "the end: the checkpoints take about 0.7 GB)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seeds the variables' initial values (rank r "
                             "uses seed*1000 + r, so the shards of a table "
                             "differ); the data's seeds are fixed")
    return parser.parse_args()


def generate(rows: int, seed: int) -> dict:
    """Criteo-like numpy columns: 'dense' [rows, 13], 'c0'..'c25' ids
    (multi-hot ones as a (values, row lengths) pair), 'label' [rows]."""
    hidden = np.random.default_rng(0)
    bias = {i: hidden.normal(size=BUCKETS[i]) for i in INFORMATIVE}
    dense_w = hidden.normal(size=NUM_DENSE) * 0.3
    rng = np.random.default_rng(seed)
    dense = np.log1p(rng.lognormal(size=(rows, NUM_DENSE))).astype(np.float32)
    logit = dense @ dense_w - 1.0
    columns = {"dense": dense}
    for i in range(NUM_CATEGORICAL):
        lengths = (rng.integers(1, MULTI_HOT[i] + 1, size=rows)
                   if i in MULTI_HOT else np.ones(rows, np.int64))
        # Power-law ids, hashed into the bucket (popular ids repeat).
        raw = rng.zipf(1.3, size=int(lengths.sum())).astype(np.uint64)
        ids = ((raw * np.uint64(2654435761) + np.uint64(i))
               % np.uint64(BUCKETS[i])).astype(np.int64)
        if i in INFORMATIVE:
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            logit += np.add.reduceat(bias[i][ids], starts) / lengths
        columns["c%d" % i] = (ids, lengths) if i in MULTI_HOT else ids
    columns["label"] = (rng.uniform(size=rows) <
                        1 / (1 + np.exp(-logit))).astype(np.float32)
    return columns


def dataset(columns: dict, batch_size: int, repeat: bool) -> tf.data.Dataset:
    columns = {k: tf.RaggedTensor.from_row_lengths(*v)
               if isinstance(v, tuple) else v for k, v in columns.items()}
    # Batches of row indices, gathered from the columns: the same batches
    # as from_tensor_slices(columns).batch(...), without the page of
    # "Type inference failed" that TF prints for sliced ragged tensors in
    # a v1 graph.
    rows = int(next(iter(columns.values())).shape[0])
    ds = tf.data.Dataset.range(rows)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    return ds.map(lambda index: {k: tf.gather(v, index)
                                 for k, v in columns.items()})


def mlp(net: tf.Tensor, widths: list, name: str) -> tf.Tensor:
    for layer, width in enumerate(widths):
        w = v1.get_variable("%s_w%d" % (name, layer), [net.shape[1], width],
                            initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("%s_b%d" % (name, layer), [width],
                            initializer=v1.zeros_initializer())
        net = tf.matmul(net, w) + b
        if layer < len(widths) - 1:
            net = tf.nn.relu(net)
    return net


def model(features: dict, sharded: bool) -> tf.Tensor:
    """DLRM-lite: bottom MLP on the dense features, one embedding per
    categorical feature (mean of the multi-hot lists), top MLP -> logit.
    ``sharded``: make the tables inside hb.embedding_scope (training);
    the export rebuilds the same graph with plain full tables."""
    with v1.variable_scope("dlrm", reuse=v1.AUTO_REUSE):
        tables = []
        with hb.embedding_scope() if sharded else _no_scope():
            for i in range(NUM_CATEGORICAL):
                tables.append(v1.get_variable(
                    "c%d_embedding" % i, shape=[BUCKETS[i], DIM],
                    initializer=v1.random_normal_initializer(stddev=0.05)))
        parts = [mlp(features["dense"], [32, DIM], "bottom")]
        for i, table in enumerate(tables):
            ids = features["c%d" % i]
            if isinstance(ids, tf.RaggedTensor):
                parts.append(tf.nn.safe_embedding_lookup_sparse(
                    table, ids.to_sparse(), combiner="mean"))
            else:
                parts.append(tf.nn.embedding_lookup(table, ids))
        return tf.squeeze(mlp(tf.concat(parts, 1), [64, 32, 1], "top"), 1)


class _no_scope:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def serving_inputs() -> dict:
    """Placeholders of the serving signature (multi-hot features as a
    dense [batch, k] id matrix padded with -1)."""
    inputs = {"dense": v1.placeholder(tf.float32, [None, NUM_DENSE], "dense")}
    for i in range(NUM_CATEGORICAL):
        shape = [None, MULTI_HOT[i]] if i in MULTI_HOT else [None]
        inputs["c%d" % i] = v1.placeholder(tf.int64, shape, "c%d" % i)
    return inputs


def from_padded(inputs: dict) -> dict:
    features = dict(inputs)
    for i in MULTI_HOT:
        features["c%d" % i] = tf.RaggedTensor.from_tensor(
            inputs["c%d" % i], padding=tf.constant(-1, tf.int64))
    return features


def padded_sample(columns: dict, rows: int) -> dict:
    """The first ``rows`` examples as serving inputs (numpy)."""
    sample = {"dense": columns["dense"][:rows]}
    for i in range(NUM_CATEGORICAL):
        ids = columns["c%d" % i]
        if isinstance(ids, tuple):
            values, lengths = ids
            padded = np.full((rows, MULTI_HOT[i]), -1, np.int64)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            for row in range(rows):
                padded[row, :lengths[row]] = values[
                    starts[row]:starts[row] + lengths[row]]
            sample["c%d" % i] = padded
        else:
            sample["c%d" % i] = ids[:rows]
    return sample


def main() -> None:
    args = parse_args()
    rank = hb.context.rank
    model_dir = args.model_dir or hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="recsys_sharded_") if rank == 0 else None)
    try:
        train(args, model_dir)
    finally:
        # Rank 0 is the last to read the directory (it checks the export);
        # the other ranks are done once the collective export returned.
        if args.model_dir is None and rank == 0:
            shutil.rmtree(model_dir, ignore_errors=True)
            print("removed %s (pass --model-dir to keep the checkpoints "
                  "and the export)" % model_dir)


def train(args: argparse.Namespace, model_dir: str) -> None:
    """Trains, evaluates and exports in ``model_dir``; exits with a message
    when the export disagrees with the model or the AUC is at chance."""
    rank, size = hb.context.rank, hb.context.world_size
    train_data = generate(args.steps * args.batch_size // 4 + 4096,
                          seed=100 + rank)
    eval_data = generate(args.eval_steps * args.batch_size, seed=900 + rank)
    # Every rank predicts the same sample at the end: rank 0's first rows.
    sample = padded_sample(generate(64, seed=7), 64)

    v1.disable_eager_execution()
    # Per rank, so that each rank's shards of a table start from different
    # values; the dense variables are rank 0's everywhere (the
    # MonitoredTrainingSession broadcasts them). Same seed and world size:
    # the same AUC run to run.
    v1.set_random_seed(args.seed * 1000 + rank)
    history = []
    with hb.scope():
        features = v1.data.make_one_shot_iterator(
            dataset(train_data, args.batch_size, repeat=True)).get_next()
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=features["label"], logits=model(features, sharded=True)))
        step = v1.train.get_or_create_global_step()
        train_op = hb.train.AdagradOptimizer(0.05).minimize(
            loss, global_step=step)

        def eval_fn() -> dict:
            batch = v1.data.make_initializable_iterator(dataset(
                eval_data, args.batch_size, repeat=False)).get_next()
            probs = tf.sigmoid(model(batch, sharded=True))
            return {"auc": hb.metrics.auc(batch["label"], probs)}

        evaluation = hb.train.EvaluationHook(
            eval_fn, steps=args.eval_steps, every_n_iter=args.eval_every,
            summary_dir=os.path.join(model_dir, "eval"), history=history)
        inputs = serving_inputs()
        sample_probs = tf.sigmoid(model(from_padded(inputs), sharded=True))
        predict = PredictAtEnd(sample_probs,
                               {inputs[k]: v for k, v in sample.items()})
        with hb.train.MonitoredTrainingSession(
                checkpoint_dir=model_dir, hooks=[evaluation, predict],
                save_checkpoint_steps=args.steps,
                log_step_count_steps=None) as sess:
            for _ in range(args.steps):
                sess.run(train_op)

    def signature_def_fn() -> dict:
        # Built by hb.train.export in a fresh graph outside hb.scope: the
        # tables are plain [bucket, dim] variables restored whole.
        inputs = serving_inputs()
        probs = tf.sigmoid(model(from_padded(inputs), sharded=False))
        return {"serving_default": v1.saved_model.predict_signature_def(
            inputs, {"probability": probs})}

    checkpoint = v1.train.latest_checkpoint(model_dir)
    export_dir = hb.train.export(os.path.join(model_dir, "export"),
                                 checkpoint, signature_def_fn)
    if rank == 0:
        local_rows = [v1.train.load_variable(checkpoint, "dlrm/c0_embedding")
                      .shape]
        print("ranks %d, %d steps of %d examples per rank, tables %d rows "
              "x %d in all" % (size, args.steps, args.batch_size,
                               sum(BUCKETS), DIM))
        for entry in history:
            print("step %5d  auc %.4f" % (entry["step"], entry["auc"]))
        print("checkpoint %s (table dlrm/c0_embedding stored whole: %s)" % (
            checkpoint, local_rows[0]))
        diff = served_difference(export_dir, sample, predict.values)
        print("export %s: plain TensorFlow predictions differ from the "
              "trained model's by %.2g at most" % (export_dir, diff))
        if diff > 1e-5:
            sys.exit("the exported model disagrees with the trained one")
    if history[-1]["auc"] < 0.6:
        sys.exit("rank %d: final AUC %.3f is not better than chance"
                 % (rank, history[-1]["auc"]))


if __name__ == "__main__":
    main()
