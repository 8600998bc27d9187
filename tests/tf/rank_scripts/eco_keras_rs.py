"""keras-rs (Keras 3) over hb.keras.layers.ShardedEmbedding, trained
data-parallel under hbrun as docs/ecosystem.md shows. Run by
tests/tf/test_ecosystem.py at 2 and 3 ranks.

- feature_cross_fit: ids -> ShardedEmbedding -> two keras_rs FeatureCross
  layers (DCN-v2) -> Dense, ``model.fit`` with hvd.DistributedOptimizer
  and the broadcast callback (Horovod style, outside hb.scope).
- retrieval_tape: a two-tower model (ShardedEmbedding towers) whose loss
  uses keras_rs' SamplingProbabilityCorrection, RemoveAccidentalHits and
  HardNegativeMining on in-batch negatives, trained with
  hvd.DistributedGradientTape; then BruteForceRetrieval over the whole
  item table (``full_table()``) ranks every user's items.

Expected values (eco_common): rank 0 trains the same layers with plain
``keras.layers.Embedding`` on the whole global batch, from the same
initial values (Constant initializers; the dense layers of ranks other
than 0 start elsewhere, so the broadcast has to reach them and not the
table shards). In-batch negatives are per rank, so the retrieval
reference's loss is the mean of the losses of the ranks' shards (see
docs/ecosystem.md); the ranking loss is a mean over examples, so its
reference is the loss of the whole batch.

SGD with momentum throughout: Keras 3's Adagrad and Adam update an
IndexedSlices gradient entry by entry, so plain Keras counts a duplicate
id apart where the sharded table sums duplicates first (docs/embedding.md,
"Keras"); a linear update makes both the same, and still scales with the
gradient (a sum taken for a mean shows).
"""
from typing import Any, List, Tuple

import numpy as np

from eco_common import (PER_RANK, STEPS, check_against_reference,
                        global_rows, reference_from_root, run_script, shard)
from train_common import rank_values, tf

import hbcore_tf as hb  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
import keras  # noqa: E402
import keras_rs  # noqa: E402

CASES = ["feature_cross_fit", "retrieval_tape"]
V = 11        # rows of the ranking table (uneven at 2 and 3 ranks)
F = 3         # ids per example
D = 4         # embedding dimension
USERS = 9     # rows of the query tower's table
ITEMS = 13    # rows of the candidate tower's table
TOP_K = 3


def constant(seed: int, rank: int, shape: Tuple[int, ...]) -> Any:
    return keras.initializers.Constant(rank_values(seed, rank, shape))


def optimizer() -> Any:
    return keras.optimizers.SGD(0.1, momentum=0.9)


def embedding(rows: int, seed: int, name: str, sharded: bool) -> Any:
    """The table of ``rows`` x D starting from the same values on every
    rank and in the reference; explicit names (the lookups' collectives
    are named after the layer, and rank 0 builds more layers)."""
    layer = (hb.keras.layers.ShardedEmbedding if sharded
             else keras.layers.Embedding)
    return layer(rows, D, embeddings_initializer=constant(seed, 0,
                                                           (rows, D)),
                 name=name)


def table_of(layer: Any) -> np.ndarray:
    """The whole table of a (sharded or plain) embedding layer."""
    if hasattr(layer, "full_table"):
        return layer.full_table()
    return np.asarray(layer.embeddings)


# --- ranking: ShardedEmbedding -> FeatureCross x 2 -> Dense ----------------

def ranking_model(sharded: bool, rank: int) -> Any:
    ids = keras.Input((F,), dtype="int64")
    x0 = keras.layers.Flatten()(embedding(V, 1, "rs_emb", sharded)(ids))
    width = F * D
    x1 = keras_rs.layers.FeatureCross(
        kernel_initializer=constant(2, rank, (width, width)),
        bias_initializer=constant(3, rank, (width,)), name="cross1")(x0)
    # Low rank: one initializer for both factors (a seeded Keras 3
    # initializer draws the same values in every process).
    x2 = keras_rs.layers.FeatureCross(
        projection_dim=2,
        kernel_initializer=keras.initializers.GlorotUniform(seed=40 + rank),
        name="cross2")(x0, x1)
    out = keras.layers.Dense(
        1, kernel_initializer=constant(5, rank, (width, 1)),
        name="out")(x2)
    return keras.Model(ids, out)


def ranking_weights(model: Any) -> List[np.ndarray]:
    weights = [table_of(model.get_layer("rs_emb"))]
    for name in ("cross1", "cross2", "out"):
        weights += model.get_layer(name).get_weights()
    return weights


def ranking_data(size: int) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([70, size])
    ids = rng.integers(0, V, size=(global_rows(size), F))
    ids[1::PER_RANK, 0] = ids[0::PER_RANK, 0]   # a duplicate id per shard
    return ids.astype(np.int64), rng.normal(
        size=(global_rows(size), 1)).astype(np.float32) * 0.3


def feature_cross_fit() -> None:
    rank, size = hvd.rank(), hvd.size()
    ids, y = ranking_data(size)
    model = ranking_model(True, rank)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer()),
                  loss="mse")
    model.fit(shard(ids, rank, size), shard(y, rank, size),
              batch_size=PER_RANK, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

    def one_process():
        ref = ranking_model(False, 0)
        ref.compile(optimizer=optimizer(), loss="mse", run_eagerly=True)
        ref.fit(ids, y, batch_size=size * PER_RANK, epochs=1, shuffle=False,
                verbose=0)
        return ranking_weights(ref)

    check_against_reference(ranking_weights(model),
                            reference_from_root(one_process),
                            "FeatureCross model")


# --- retrieval: two towers, in-batch negatives, keras_rs retrieval layers ---

class Towers:
    """The query tower (user table + a Dense projection) and the
    candidate tower (item table), sharded or plain."""

    def __init__(self, sharded: bool, rank: int) -> None:
        self.users = embedding(USERS, 10, "rs_users", sharded)
        self.items = embedding(ITEMS, 11, "rs_items", sharded)
        self.project = keras.layers.Dense(
            D, kernel_initializer=constant(12, rank, (D, D)),
            bias_initializer=constant(13, rank, (D,)), name="rs_project")
        self.project.build((None, D))
        self.users.build()
        self.items.build()
        # Where each item is sampled from in the data (fixed, known).
        self.item_probability = tf.constant(
            np.linspace(0.02, 0.2, ITEMS), tf.float32)
        self.correct = keras_rs.layers.SamplingProbabilityCorrection()
        self.remove_hits = keras_rs.layers.RemoveAccidentalHits()
        self.hard_negatives = keras_rs.layers.HardNegativeMining(2)

    @property
    def variables(self) -> List[Any]:
        return (self.users.trainable_variables
                + self.items.trainable_variables
                + self.project.trainable_variables)

    def queries(self, users: Any) -> Any:
        return self.project(self.users(users))

    def loss(self, users: Any, items: Any) -> Any:
        """keras_rs' in-batch softmax loss of one batch: every other item
        of the batch is a negative."""
        queries = self.queries(users)
        logits = tf.matmul(queries, self.items(items), transpose_b=True)
        labels = tf.eye(tf.shape(logits)[0], dtype=logits.dtype)
        probability = tf.gather(self.item_probability, items)
        logits = self.correct(logits, tf.broadcast_to(
            probability[tf.newaxis, :], tf.shape(logits)))
        logits = self.remove_hits(logits, labels, items)
        logits, labels = self.hard_negatives(logits, labels)
        return tf.reduce_mean(keras.losses.categorical_crossentropy(
            labels, logits, from_logits=True))

    def weights(self) -> List[np.ndarray]:
        return [table_of(self.users), table_of(self.items)] + [
            np.asarray(w) for w in self.project.get_weights()]

    def top_items(self) -> List[np.ndarray]:
        """BruteForceRetrieval over the whole item table: every user's
        top TOP_K items and their scores."""
        retrieval = keras_rs.layers.BruteForceRetrieval(k=TOP_K)
        retrieval.update_candidates(
            tf.constant(table_of(self.items)),
            tf.range(ITEMS, dtype=tf.int32))
        scores, ids = retrieval(self.queries(tf.range(USERS,
                                                      dtype=tf.int64)))
        return [np.asarray(scores), np.asarray(ids)]


def retrieval_data(size: int) -> Tuple[np.ndarray, np.ndarray]:
    """(user, item) pairs of every step's global batch; every shard has
    an accidental hit (an item twice)."""
    rng = np.random.default_rng([80, size])
    users = rng.integers(0, USERS, global_rows(size))
    items = rng.integers(0, ITEMS, global_rows(size))
    items[2::PER_RANK] = items[0::PER_RANK]
    return users.astype(np.int64), items.astype(np.int64)


def retrieval_tape() -> None:
    rank, size = hvd.rank(), hvd.size()
    users, items = retrieval_data(size)
    mine_u, mine_i = shard(users, rank, size), shard(items, rank, size)
    towers = Towers(True, rank)
    hb.broadcast_variables(towers.variables, root_rank=0)
    opt = optimizer()
    for step in range(STEPS):
        rows = slice(step * PER_RANK, (step + 1) * PER_RANK)
        with tf.GradientTape() as tape:
            loss = towers.loss(mine_u[rows], mine_i[rows])
        tape = hb.DistributedGradientTape(tape)
        grads = tape.gradient(loss, towers.variables)
        opt.apply_gradients(zip(grads, towers.variables))

    def one_process():
        ref = Towers(False, 0)
        ref_opt = optimizer()
        batch = size * PER_RANK
        for step in range(STEPS):
            with tf.GradientTape() as tape:
                # The mean of the ranks' in-batch losses: each rank's
                # negatives are the items of its own shard.
                loss = tf.add_n([
                    ref.loss(users[a:a + PER_RANK], items[a:a + PER_RANK])
                    for a in range(step * batch, (step + 1) * batch,
                                   PER_RANK)]) / size
            grads = tape.gradient(loss, ref.variables)
            ref_opt.apply_gradients(zip(grads, ref.variables))
        return ref.weights() + ref.top_items()

    check_against_reference(towers.weights() + towers.top_items(),
                            reference_from_root(one_process),
                            "two towers, then their top items")


if __name__ == "__main__":
    run_script(CASES, lambda size: {"feature_cross_fit": feature_cross_fit,
                                    "retrieval_tape": retrieval_tape},
               keras.__name__)
