"""A HybridBackend-style recommender model in a tf.compat.v1 graph, on
Parquet files it writes itself, with unbalanced data per rank.

    hbrun -np 2 python examples/hb_recsys_v1.py
    hbrun -np 3 python examples/hb_recsys_v1.py --rows 6000 --epochs 2

What it shows (HybridBackend's API; only the import differs from a
``hybridbackend.tensorflow`` script):

- every rank writes its own training and evaluation Parquet files, rank r
  with more rows than rank r - 1 (unbalanced input), and reads them with
  ``hb.data.ParquetDataset``;
- ``hb.scope(data_sync_drop_remainder=False)``: the
  ``hb.train.AdagradOptimizer`` averages gradients over the ranks, and
  ranks that run out of data keep joining steps with empty batches until
  every rank is done (``hb.data.make_one_shot_iterator``), so every row of
  every rank is trained on and nobody hangs;
- embedding tables (``tf.compat.v1.get_variable`` + ``embedding_lookup``)
  feeding an MLP for click-through prediction;
- ``hb.metrics.auc`` over every rank's evaluation rows, run by an
  ``hb.train.EvaluationHook`` every --eval-every steps and at the end,
  written as TensorBoard summaries by rank 0;
- ``hb.train.MonitoredTrainingSession``: rank 0 writes checkpoints, every
  rank restores, initial values come from rank 0.

Rank 0 prints the evaluation history; the script fails if the final AUC
is not clearly better than chance or the ranks disagree on the weights.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

import hbcore
import hbcore_tf as hb

v1 = tf.compat.v1
CATEGORICAL = {"user": 5000, "item": 2000, "category": 100}
DENSE = 4
DIM = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4000,
                        help="training rows of rank 0 (rank r has "
                             "rows * (1 + r / 4))")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--eval-every", type=int, default=40)
    parser.add_argument("--eval-steps", type=int, default=8)
    parser.add_argument("--model-dir", default=None,
                        help="checkpoints and summaries (default: a "
                             "temporary directory shared by the ranks)")
    return parser.parse_args()


def write_parquet(path: str, rows: int, seed: int) -> None:
    """Click data from a fixed hidden model: clicks depend on the user's and
    item's hidden affinity and on the dense features."""
    hidden = np.random.default_rng(0)
    user_bias = hidden.normal(size=CATEGORICAL["user"])
    item_bias = hidden.normal(size=CATEGORICAL["item"])
    dense_w = hidden.normal(size=DENSE)
    rng = np.random.default_rng(seed)
    users = rng.integers(0, CATEGORICAL["user"], size=rows)
    items = rng.integers(0, CATEGORICAL["item"], size=rows)
    dense = rng.normal(size=(rows, DENSE)).astype(np.float32)
    logit = 1.5 * (user_bias[users] + item_bias[items]) + dense @ dense_w
    label = (rng.uniform(size=rows) < 1 / (1 + np.exp(-logit))).astype(
        np.float32)
    columns = {"user": users, "item": items,
               "category": items % CATEGORICAL["category"], "label": label}
    for i in range(DENSE):
        columns["f%d" % i] = dense[:, i]
    pq.write_table(pa.table(columns), path, row_group_size=1024)


def model(features: dict) -> tf.Tensor:
    """Embeddings of the categorical columns + dense features -> MLP -> logit."""
    with v1.variable_scope("model", reuse=v1.AUTO_REUSE):
        parts = []
        for name, buckets in CATEGORICAL.items():
            table = v1.get_variable(
                "%s_embedding" % name, shape=[buckets, DIM],
                initializer=v1.random_normal_initializer(stddev=0.05))
            parts.append(tf.nn.embedding_lookup(table, features[name]))
        parts.append(tf.stack([features["f%d" % i] for i in range(DENSE)], 1))
        net = tf.concat(parts, axis=1)
        for layer, width in enumerate([32, 16]):
            w = v1.get_variable("w%d" % layer, [net.shape[1], width],
                                initializer=v1.glorot_uniform_initializer())
            b = v1.get_variable("b%d" % layer, [width],
                                initializer=v1.zeros_initializer())
            net = tf.nn.relu(tf.matmul(net, w) + b)
        w = v1.get_variable("w_out", [16, 1],
                            initializer=v1.glorot_uniform_initializer())
        b = v1.get_variable("b_out", [1], initializer=v1.zeros_initializer())
        return tf.squeeze(tf.matmul(net, w) + b, axis=1)


class _FetchAtEnd(v1.train.SessionRunHook):
    """Reads tensors when the session ends (after the last step)."""

    def __init__(self, tensors: list) -> None:
        self.tensors, self.values = tensors, None

    def end(self, session: v1.Session) -> None:
        self.values = session.run(self.tensors)


def main() -> None:
    args = parse_args()
    rank, size = hb.context.rank, hb.context.world_size
    model_dir = args.model_dir or hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="hb_recsys_") if rank == 0 else None)
    data_dir = os.path.join(model_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    train_file = os.path.join(data_dir, "train-%d.parquet" % rank)
    eval_file = os.path.join(data_dir, "eval-%d.parquet" % rank)
    train_rows = args.rows + args.rows * rank // 4
    write_parquet(train_file, train_rows, seed=100 + rank)
    write_parquet(eval_file, 8 * args.batch_size, seed=900 + rank)

    v1.disable_eager_execution()
    history = []
    with hb.scope(data_sync_drop_remainder=False):
        train = hb.data.ParquetDataset(train_file, args.batch_size)
        train = train.repeat(args.epochs)
        features = hb.data.make_one_shot_iterator(train).get_next()
        logits = model(features)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=features["label"], logits=logits))
        step = v1.train.get_or_create_global_step()
        train_op = hb.train.AdagradOptimizer(0.05).minimize(
            loss, global_step=step)

        def eval_fn() -> dict:
            evaluation = hb.data.ParquetDataset(eval_file, args.batch_size)
            batch = v1.data.make_initializable_iterator(evaluation).get_next()
            probs = tf.sigmoid(model(batch))
            return {"auc": hb.metrics.auc(batch["label"], probs),
                    "ctr": hb.metrics.mean(batch["label"])}

        evaluation = hb.train.EvaluationHook(
            eval_fn, steps=args.eval_steps, every_n_iter=args.eval_every,
            summary_dir=os.path.join(model_dir, "eval"), history=history)
        weights = _FetchAtEnd(v1.trainable_variables())
        steps = 0
        with hb.train.MonitoredTrainingSession(
                checkpoint_dir=model_dir, hooks=[evaluation, weights],
                save_checkpoint_steps=args.eval_every,
                log_step_count_steps=None) as sess:
            while not sess.should_stop():
                sess.run(train_op)
                steps += 1

    rows = hbcore.allgather_object(train_rows)
    same = hbcore.allgather_object([float(np.sum(w)) for w in weights.values])
    if rank == 0:
        print("ranks %d, training rows per rank %s, steps %d (the largest "
              "rank's batches x epochs)" % (size, rows, steps))
        for entry in history:
            print("step %5d  auc %.4f  ctr %.4f" % (entry["step"],
                                                    entry["auc"],
                                                    entry["ctr"]))
        print("checkpoints in %s" % model_dir)
    if any(s != same[0] for s in same):
        sys.exit("rank %d: weights differ between ranks" % rank)
    if history[-1]["auc"] < 0.6:
        sys.exit("rank %d: final AUC %.3f is not better than chance"
                 % (rank, history[-1]["auc"]))
    if rank == 0:
        print("weights identical on all ranks")


if __name__ == "__main__":
    main()
