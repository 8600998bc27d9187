"""The recommender model of hb_recsys_v1.py in Keras 3 (or tf_keras with
TF_USE_LEGACY_KERAS=1): ``model.fit`` in ``hb.scope()`` on unbalanced
Parquet input, with the global AUC.

    hbrun -np 2 python examples/hb_keras_fit.py
    hbrun -np 3 python examples/hb_keras_fit.py --rows 6000 --epochs 2

- every rank writes its own Parquet files, rank r with more rows than rank
  r - 1, and reads them with ``hb.data.ParquetDataset``;
- ``hb.data.synchronized(ds, drop_remainder=False)``: every rank runs the
  same number of steps per epoch (no ``steps_per_epoch``); ranks that run
  out of data feed empty batches, which do not count in the gradient
  average;
- the model and its optimizer are built in ``hb.scope()``: gradients are
  averaged over the ranks and rank 0's initial weights are used everywhere;
- ``hb.keras.metrics.AUC``: the AUC that fit and evaluate report at the end
  of each epoch is over every rank's examples.

Rank 0 prints the per-epoch history; the script fails if the ranks
disagree on the weights or on the AUC, or the AUC is no better than chance.
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
from hbcore_tf._base import compat as _compat

keras = _compat.keras_module()  # Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1
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
    return parser.parse_args()


def write_parquet(path: str, rows: int, seed: int) -> None:
    """Click data from a fixed hidden model (as in hb_recsys_v1.py)."""
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


def split_label(batch: dict) -> tuple:
    features = {k: v for k, v in batch.items() if k != "label"}
    features["dense"] = tf.stack([features.pop("f%d" % i)
                                  for i in range(DENSE)], axis=1)
    return features, batch["label"]


def build_model() -> keras.Model:
    inputs = {name: keras.Input(shape=(), name=name, dtype="int64")
              for name in CATEGORICAL}
    inputs["dense"] = keras.Input(shape=(DENSE,), name="dense_features")
    parts = [keras.layers.Embedding(buckets, DIM, name=name + "_embedding")(
        inputs[name]) for name, buckets in CATEGORICAL.items()]
    net = keras.layers.Concatenate()(parts + [inputs["dense"]])
    for layer, width in enumerate((32, 16)):
        net = keras.layers.Dense(width, activation="relu",
                                 name="hidden%d" % layer)(net)
    output = keras.layers.Dense(1, activation="sigmoid", name="click")(net)
    return keras.Model(inputs, output)


def main() -> None:
    args = parse_args()
    rank, size = hb.context.rank, hb.context.world_size
    data_dir = hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="hb_keras_fit_") if rank == 0 else None)
    train_file = os.path.join(data_dir, "train-%d.parquet" % rank)
    eval_file = os.path.join(data_dir, "eval-%d.parquet" % rank)
    train_rows = args.rows + args.rows * rank // 4
    write_parquet(train_file, train_rows, seed=100 + rank)
    write_parquet(eval_file, 8 * args.batch_size, seed=900 + rank)

    train = hb.data.synchronized(
        hb.data.ParquetDataset(train_file, args.batch_size).map(split_label),
        drop_remainder=False)
    evaluation = hb.data.ParquetDataset(eval_file, args.batch_size).map(
        split_label)
    with hb.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adagrad(0.05),
                      loss="binary_crossentropy",
                      metrics=[hb.keras.metrics.AUC(name="auc")],
                      jit_compile=False)
    history = model.fit(train, epochs=args.epochs, verbose=0)
    result = model.evaluate(evaluation, verbose=0, return_dict=True)

    aucs = hbcore.allgather_object([history.history["auc"], result["auc"]])
    sums = hbcore.allgather_object([float(np.sum(w))
                                    for w in model.get_weights()])
    rows = hbcore.allgather_object(train_rows)
    if rank == 0:
        print("ranks %d, training rows per rank %s" % (size, rows))
        for epoch, (loss, auc) in enumerate(zip(history.history["loss"],
                                                history.history["auc"])):
            print("epoch %d  loss %.4f (rank 0's)  train auc %.4f (global)"
                  % (epoch + 1, loss, auc))
        print("evaluation auc %.4f (global)" % result["auc"])
    if any(s != sums[0] for s in sums):
        sys.exit("rank %d: weights differ between ranks" % rank)
    if any(a != aucs[0] for a in aucs):
        sys.exit("rank %d: ranks report different AUCs: %s" % (rank, aucs))
    if result["auc"] < 0.6:
        sys.exit("rank %d: AUC %.3f is not better than chance"
                 % (rank, result["auc"]))
    if rank == 0:
        print("weights and AUC identical on all ranks")


if __name__ == "__main__":
    main()
