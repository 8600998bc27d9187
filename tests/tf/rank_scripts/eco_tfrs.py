"""TensorFlow Recommenders (tfrs 0.7.7, tf_keras: TF_USE_LEGACY_KERAS=1)
trained data-parallel under hbrun as docs/ecosystem.md shows:
``model.compile(optimizer=hvd.DistributedOptimizer(...))`` and the
broadcast callback; tfrs' own ``train_step`` (tape.gradient, then
``optimizer.apply_gradients``) is left as it is. Run by
tests/tf/test_ecosystem.py at 2 and 3 ranks.

- ranking: a tfrs.models.Model with tfrs.tasks.Ranking (mean squared
  error, a mean over examples): the reference is one process on the whole
  batch.
- retrieval_in_batch: a two-tower model with tfrs.tasks.Retrieval
  (accidental hits removed). Its negatives are the other candidates of
  the rank's own batch, and its loss is a sum over the rank's queries; the
  optimizer averages the ranks' gradients, so the reference is one
  process minimising the mean of the shards' losses.
- retrieval_global_negatives: the same model with the candidates of every
  rank gathered (docs/ecosystem.md's recipe: hvd.allgather with its
  gradient summed over ranks). Every query now sees the global batch's
  candidates, and the ranks' losses add up to the one-process loss of the
  global batch, so the reference is that loss divided by the number of
  ranks (the optimizer's average).

Each reference is trained by rank 0 alone in plain tf_keras (eco_common),
from the initial weights every rank draws after the same
``keras.utils.set_random_seed`` (see SEED).
"""
from typing import Any, Callable, Dict, Tuple

import numpy as np

from eco_common import (PER_RANK, check_against_reference, global_rows,
                        reference_from_root, run_script, shard)
from train_common import tf

import hbcore_tf  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402
import tensorflow_recommenders as tfrs  # noqa: E402

keras = _compat.keras_module()

CASES = ["ranking", "retrieval_in_batch", "retrieval_global_negatives"]
USERS = 9
ITEMS = 13
D = 4
# tfrs models are subclassed: their weights are created in the first
# training step, after the broadcast callback's on_train_begin, so each
# rank would take that step from its own random weights (the callback
# broadcasts rank 0's at the end of it). The same seed on every rank
# before building is docs/ecosystem.md's remedy: every rank and the
# reference then draw the same initial weights.
SEED = 7


def tables() -> Tuple[Any, Any]:
    """The user and item tables (Keras' default initializer)."""
    return (keras.layers.Embedding(USERS, D),
            keras.layers.Embedding(ITEMS, D))


class RankingModel(tfrs.models.Model):
    """tfrs' ranking tutorial, small: user and item embeddings -> MLP ->
    rating, with tfrs.tasks.Ranking."""

    def __init__(self) -> None:
        super().__init__()
        self.users, self.items = tables()
        self.rating = keras.Sequential([
            keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)])
        self.task = tfrs.tasks.Ranking(
            loss=keras.losses.MeanSquaredError(),
            metrics=[keras.metrics.RootMeanSquaredError()])

    def call(self, features: Dict[str, Any]) -> Any:
        return self.rating(tf.concat([self.users(features["user"]),
                                      self.items(features["item"])], axis=1))

    def compute_loss(self, features: Dict[str, Any],
                     training: bool = False) -> Any:
        return self.task(labels=features["rating"],
                         predictions=self(features))


@tf.custom_gradient
def summed_over_ranks(x: Any) -> Any:
    """x, with its gradient multiplied by the number of ranks: allgather's
    gradient is the AVERAGE over ranks of the output gradients (Horovod's
    rule, made for a loss that every rank computes alike); here each rank's
    loss is its own and the ranks' losses add up, so the gradient must be
    their sum."""
    size = hbcore_tf.size()
    return tf.identity(x), lambda dy: dy * size


def global_candidates(candidates: Any, ids: Any) -> Tuple[Any, Any]:
    """Every rank's candidates and ids (allgather), this rank's first:
    tfrs.tasks.Retrieval takes query i's positive to be candidate i."""
    everyone = hbcore_tf.allgather(summed_over_ranks(candidates))
    everyone_ids = hbcore_tf.allgather(ids)
    # Rank r's block starts at the sum of the batch sizes before it.
    sizes = hbcore_tf.allgather(tf.shape(ids)[:1])
    start = tf.reduce_sum(sizes[:hbcore_tf.rank()])
    return (tf.roll(everyone, -start, axis=0),
            tf.roll(everyone_ids, -start, axis=0))


class TwoTowerModel(tfrs.models.Model):
    """tfrs' retrieval tutorial, small: a user tower (table + Dense), an
    item tower (table), tfrs.tasks.Retrieval with accidental hits
    removed."""

    def __init__(self, global_negatives: bool = False,
                 loss_scale: float = 1.0) -> None:
        super().__init__()
        self.users, self.items = tables()
        self.project = keras.layers.Dense(D)
        self.task = tfrs.tasks.Retrieval(remove_accidental_hits=True)
        self.global_negatives = global_negatives
        self.loss_scale = loss_scale

    def compute_loss(self, features: Dict[str, Any],
                     training: bool = False) -> Any:
        queries = self.project(self.users(features["user"]))
        candidates = self.items(features["item"])
        ids = features["item"]
        if self.global_negatives:
            candidates, ids = global_candidates(candidates, ids)
        return self.loss_scale * self.task(
            queries, candidates, candidate_ids=ids, compute_metrics=False)


def global_data(size: int) -> Dict[str, np.ndarray]:
    """Every step's global batch of (user, item, rating); each rank's
    shard of a step has an item twice (an accidental hit, and a duplicate
    row in the item table's gradient)."""
    rng = np.random.default_rng([90, size])
    n = global_rows(size)
    items = rng.integers(0, ITEMS, n)
    items[2::PER_RANK] = items[0::PER_RANK]
    return {"user": rng.integers(0, USERS, n).astype(np.int64),
            "item": items.astype(np.int64),
            "rating": rng.uniform(1.0, 5.0, (n, 1)).astype(np.float32)}


def batches(data: Dict[str, np.ndarray], batch: int) -> Any:
    return tf.data.Dataset.from_tensor_slices(data).batch(batch)


def train_case(make: Any, reference_make: Any, what: str) -> None:
    """Trains ``make()`` on this rank's shard with hvd.DistributedOptimizer
    and checks it against ``reference_make()`` trained by rank 0 on the
    global batch of every step, each built after
    ``keras.utils.set_random_seed(SEED)``."""
    rank, size = hvd.rank(), hvd.size()
    data = global_data(size)

    def optimizer():
        return keras.optimizers.Adagrad(0.5)

    keras.utils.set_random_seed(SEED)
    model = make()
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer()))
    model.fit(batches({k: shard(v, rank, size) for k, v in data.items()},
                      PER_RANK), epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

    def one_process():
        keras.utils.set_random_seed(SEED)
        ref = reference_make()
        ref.compile(optimizer=optimizer(), run_eagerly=True)
        ref.fit(batches(data, size * PER_RANK), epochs=1, verbose=0)
        return ref.get_weights()

    check_against_reference(model.get_weights(),
                            reference_from_root(one_process), what)


class MeanOfShards(TwoTowerModel):
    """The in-batch reference: one step per global batch, whose loss is
    the mean over the ranks' shards of Retrieval's loss on the shard (each
    shard's candidates are the negatives of its queries)."""

    def __init__(self, shards: int) -> None:
        super().__init__()
        self.shards = shards

    def compute_loss(self, features: Dict[str, Any],
                     training: bool = False) -> Any:
        losses = []
        for s in range(self.shards):
            rows = slice(s * PER_RANK, (s + 1) * PER_RANK)
            losses.append(super().compute_loss(
                {k: v[rows] for k, v in features.items()}, training))
        return tf.add_n(losses) / self.shards


def cases(size: int) -> Dict[str, Callable[[], None]]:
    return {
        "ranking": lambda: train_case(RankingModel, RankingModel,
                                      "Ranking"),
        "retrieval_in_batch": lambda: train_case(
            TwoTowerModel, lambda: MeanOfShards(size),
            "Retrieval, in-batch negatives"),
        "retrieval_global_negatives": lambda: train_case(
            lambda: TwoTowerModel(global_negatives=True),
            lambda: TwoTowerModel(loss_scale=1.0 / size),
            "Retrieval, every rank's negatives"),
    }


if __name__ == "__main__":
    run_script(CASES, cases, keras.__name__)
