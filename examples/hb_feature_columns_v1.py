"""A HybridBackend-style tf.compat.v1 script: feature columns over sharded
tables, fed from Parquet files with list columns.

    hbrun -np 2 python examples/hb_feature_columns_v1.py
    hbrun -np 3 python examples/hb_feature_columns_v1.py --steps 300

What it shows (HybridBackend's API; only the import differs from a
``hybridbackend.tensorflow`` script):

- rank 0 writes a training and an evaluation Parquet file with pyarrow:
  a user id, two list columns (the user's recently viewed items, the
  ad's tags: one list of ids per row, of any length), a price and the
  click label; every rank reads its partition with
  ``hb.data.ParquetDataset(..., partition_count=world_size,
  partition_index=rank)`` and turns the list columns into SparseTensors
  with ``hb.data.to_sparse()``;
- ``tf.feature_column`` columns (identity and hash-bucket categorical
  columns, mean and sqrtn combiners, a numeric column) through
  ``hb.keras.layers.DenseFeatures`` in ``hb.scope()``: each embedding
  column's table is split over the ranks and looked up across them; the
  MLP above is data parallel (``hb.train.AdagradOptimizer``);
- ``hb.metrics.auc`` and ``hb.metrics.gauc`` (the AUC within each user's
  examples, averaged over users weighted by their example counts) over
  every rank's evaluation rows, in an ``hb.train.EvaluationHook``;
- ``hb.train.MonitoredTrainingSession``: checkpoints written by rank 0,
  each table stored whole in id order;
- ``hb.saved_model.export``: a SavedModel whose lookups are plain gathers,
  run by plain TensorFlow in a separate process (no hbcore), whose
  predictions must equal the trained graph's.

Rank 0 prints the evaluation history and the export check; the script
fails if the final AUC is not clearly better than chance or the export
disagrees with the trained model. Without ``--model-dir`` everything goes
to a temporary directory that is removed at the end.
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
from serving_check import PredictAtEnd, served_difference

v1 = tf.compat.v1
fc = tf.feature_column
USERS, ITEMS, TAG_BUCKETS = 40, 500, 64
MAX_ITEMS, MAX_TAGS = 5, 3                  # longest lists in the data
DIM = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100,
                        help="training steps (the data repeats)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--eval-steps", type=int, default=4)
    parser.add_argument("--model-dir", default=None,
                        help="data, checkpoints, summaries and the export, "
                             "kept (default: a temporary directory, removed "
                             "at the end)")
    return parser.parse_args()


def write_parquet(path: str, rows: int, seed: int) -> None:
    """Clicks from a fixed hidden model of the user, the viewed items and
    the price; the tags are noise. List columns hold 1 to MAX_* ids."""
    hidden = np.random.default_rng(0)
    user_bias = hidden.normal(size=USERS)
    item_bias = hidden.normal(size=ITEMS)
    rng = np.random.default_rng(seed)
    users = rng.integers(0, USERS, size=rows)
    items = [rng.integers(0, ITEMS, size=rng.integers(1, MAX_ITEMS + 1))
             for _ in range(rows)]
    tags = [rng.integers(0, 1000, size=rng.integers(1, MAX_TAGS + 1))
            for _ in range(rows)]
    price = rng.uniform(0, 2, size=rows).astype(np.float32)
    logit = (user_bias[users]
             + 2.0 * np.array([item_bias[i].mean() for i in items])
             - 2.0 * (price - 1.0))
    label = (rng.uniform(size=rows) < 1 / (1 + np.exp(-logit))).astype(
        np.float32)
    table = pa.table({
        "user": pa.array(users, pa.int64()),
        "items": pa.array([list(i) for i in items], pa.list_(pa.int64())),
        "tags": pa.array([list(t) for t in tags], pa.list_(pa.int64())),
        "price": pa.array(price), "label": pa.array(label)})
    pq.write_table(table, path, row_group_size=256)


def columns() -> list:
    """HybridBackend users' usual feature columns."""
    user = fc.categorical_column_with_identity("user", USERS)
    items = fc.categorical_column_with_identity("items", ITEMS)
    tags = fc.categorical_column_with_hash_bucket("tags", TAG_BUCKETS,
                                                  dtype=tf.int64)
    return [fc.embedding_column(user, DIM),
            fc.embedding_column(items, DIM, combiner="mean"),
            fc.embedding_column(tags, DIM, combiner="sqrtn"),
            fc.numeric_column("price")]


class Model:
    """DenseFeatures over the columns -> MLP -> click logit. One instance
    per graph: every call (training, evaluation, the sample prediction)
    uses the same layer, so the same tables."""

    def __init__(self) -> None:
        self.features = hb.keras.layers.DenseFeatures(columns(),
                                                      name="features")

    def __call__(self, features: dict) -> tf.Tensor:
        net = self.features(features)
        with v1.variable_scope("mlp", reuse=v1.AUTO_REUSE):
            for layer, width in enumerate([32, 16, 1]):
                w = v1.get_variable(
                    "w%d" % layer, [net.shape[1], width],
                    initializer=v1.glorot_uniform_initializer())
                b = v1.get_variable("b%d" % layer, [width],
                                    initializer=v1.zeros_initializer())
                net = tf.matmul(net, w) + b
                if width > 1:
                    net = tf.nn.relu(net)
        return tf.squeeze(net, 1)


def parquet(path: str, batch_size: int) -> tf.data.Dataset:
    """This rank's partition of ``path``, list columns as SparseTensors."""
    ds = hb.data.ParquetDataset(path, batch_size,
                                partition_count=hb.context.world_size,
                                partition_index=hb.context.rank)
    return ds.apply(hb.data.to_sparse())


def serving_inputs() -> dict:
    """Placeholders of the serving signature: list columns as dense id
    matrices padded with -1."""
    return {"user": v1.placeholder(tf.int64, [None], "user"),
            "items": v1.placeholder(tf.int64, [None, MAX_ITEMS], "items"),
            "tags": v1.placeholder(tf.int64, [None, MAX_TAGS], "tags"),
            "price": v1.placeholder(tf.float32, [None], "price")}


def from_padded(inputs: dict) -> dict:
    features = dict(inputs)
    for name in ("items", "tags"):
        where = tf.where(inputs[name] >= 0)
        features[name] = tf.SparseTensor(
            where, tf.gather_nd(inputs[name], where),
            tf.shape(inputs[name], out_type=tf.int64))
    return features


def padded_sample(path: str, rows: int) -> dict:
    """The file's first ``rows`` rows as serving inputs (numpy)."""
    table = pq.read_table(path).slice(0, rows).to_pydict()
    sample = {"user": np.array(table["user"], np.int64),
              "price": np.array(table["price"], np.float32)}
    for name, width in (("items", MAX_ITEMS), ("tags", MAX_TAGS)):
        padded = np.full((rows, width), -1, np.int64)
        for row, ids in enumerate(table[name]):
            padded[row, :len(ids)] = ids
        sample[name] = padded
    return sample


def main() -> None:
    args = parse_args()
    # The first use of hb.context starts hbcore (HybridBackend scripts
    # never call init()).
    rank = hb.context.rank
    if args.model_dir is not None:
        train(args, args.model_dir)
        return
    # Rank 0's temporary directory serves every rank (one host). Rank 0
    # removes it when it is done, after the others: it reads the export
    # last. The other ranks' own directories stay empty.
    with tempfile.TemporaryDirectory(prefix="hb_feature_columns_") as own:
        train(args, hbcore.broadcast_object(own if rank == 0 else None))


def train(args: argparse.Namespace, model_dir: str) -> None:
    """Writes the data, trains, evaluates and exports in ``model_dir``;
    exits with a message when the export disagrees with the model or the
    AUC is at chance."""
    rank, size = hb.context.rank, hb.context.world_size
    train_file = os.path.join(model_dir, "train.parquet")
    eval_file = os.path.join(model_dir, "eval.parquet")
    if rank == 0:
        os.makedirs(model_dir, exist_ok=True)
        write_parquet(train_file, 4096, seed=1)
        write_parquet(eval_file, 1024, seed=2)
    hbcore.barrier()                         # the files exist on every rank
    sample = padded_sample(eval_file, 32)

    v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")   # feature columns' deprecation notes
    history = []
    with hb.scope():
        model = Model()
        batch = hb.data.make_one_shot_iterator(
            parquet(train_file, args.batch_size).repeat()).get_next()
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
            labels=batch["label"], logits=model(batch)))
        step = v1.train.get_or_create_global_step()
        train_op = hb.train.AdagradOptimizer(0.1).minimize(
            loss, global_step=step)

        def eval_fn() -> dict:
            rows = v1.data.make_initializable_iterator(
                parquet(eval_file, args.batch_size)).get_next()
            probs = tf.sigmoid(model(rows))
            return {"auc": hb.metrics.auc(rows["label"], probs),
                    "gauc": hb.metrics.gauc(rows["label"], probs,
                                            rows["user"])}

        evaluation = hb.train.EvaluationHook(
            eval_fn, steps=args.eval_steps, every_n_iter=args.eval_every,
            summary_dir=os.path.join(model_dir, "eval"), history=history)
        inputs = serving_inputs()
        predict = PredictAtEnd(tf.sigmoid(model(from_padded(inputs))),
                               {inputs[k]: v for k, v in sample.items()})
        stop = v1.train.StopAtStepHook(last_step=args.steps)
        with hb.train.MonitoredTrainingSession(
                checkpoint_dir=model_dir, save_checkpoint_steps=args.steps,
                hooks=[stop, evaluation, predict],
                log_step_count_steps=None) as sess:
            while not sess.should_stop():
                sess.run(train_op)

    def signature_def_fn() -> dict:
        # Built by the export in a fresh graph with sharding suspended: the
        # columns' tables are plain variables restored whole.
        inputs = serving_inputs()
        probs = tf.sigmoid(Model()(from_padded(inputs)))
        return {"serving_default": v1.saved_model.predict_signature_def(
            inputs, {"probability": probs})}

    checkpoint = v1.train.latest_checkpoint(model_dir)
    export_dir = hb.saved_model.export(os.path.join(model_dir, "export"),
                                       checkpoint, signature_def_fn)
    if rank == 0:
        print("ranks %d, %d steps of %d rows per rank" % (
            size, args.steps, args.batch_size))
        for entry in history:
            print("step %5d  auc %.4f  gauc %.4f" % (
                entry["step"], entry["auc"], entry["gauc"]))
        # Each table is stored whole under its own name, whatever the
        # world size.
        for name, shape in v1.train.list_variables(checkpoint):
            if name.endswith("embedding_weights"):
                print("checkpoint table %s %s" % (name, shape))
        diff = served_difference(export_dir, sample, predict.values)
        print("export: plain TensorFlow predictions differ from the trained "
              "graph's by %.2g at most" % diff)
        if diff > 1e-5:
            sys.exit("the exported model disagrees with the trained one")
    for metric in ("auc", "gauc"):
        if history[-1][metric] < 0.6:
            sys.exit("rank %d: final %s %.3f is not better than chance"
                     % (rank, metric, history[-1][metric]))


if __name__ == "__main__":
    main()
