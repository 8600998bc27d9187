"""Checkpoints of hb.keras.layers.DynamicEmbedding, resharded 2 -> 3 -> 2
(Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1). Run by
tests/tf/test_dynamic_embedding.py three times, one phase each:

    dynamic_checkpoint.py DIR save_at_2      (2 ranks)
    dynamic_checkpoint.py DIR restore_at_3   (3 ranks)
    dynamic_checkpoint.py DIR restore_at_2   (2 ranks)

The model and data are dynamic_keras.py's (its global batches, the same at
every world size); the optimizer is Keras' Adagrad, whose accumulators
(slots) change the next step, so a step after a restore checks them. Every
expected value comes from plain single-process Keras (an Embedding over the
vocabulary, rows from the per-key formula, trained on the whole global
batch of each step): ``reference(steps)``.

- save_at_2: two steps, tf.train.Checkpoint(model, optimizer).save to
  DIR/a; rank 0 reads the file with plain TF: the table's and its slot's
  ``-keys`` are the keys seen, ascending; ``-values`` the reference rows;
  ``-freqs`` each key's lookups (its occurrences in the two batches, plus
  one per rank for the check's lookup of every key); ``-versions`` the
  step of each key's last training lookup (``last_steps``). Keras also
  saves DIR/w.weights.h5
  (save_weights) and DIR/m.keras (save).
- restore_at_3: restores DIR/a (rows go to their new owners: each rank
  holds the keys the hash gives it), checks the rows, saves the restored
  state to DIR/a3 (its table tensors equal DIR/a's, but for ``-freqs``:
  3 more, the check's lookups at 3 ranks), trains a third step
  (checks the slots) and saves DIR/b, whose versions show that the
  table's step went on from the restored versions. DIR/w.weights.h5
  loads into a fresh model (load_weights) with its versions,
  DIR/m.keras with load_model. Loading another kind of checkpoint into
  a dynamic table is an error naming the table; so is tf_keras' legacy .h5 save (it
  stores variables by value).
- restore_at_2: restores DIR/b before the optimizer is built (TF
  restores the slots when they are created), checks, trains a fourth
  step.

And the kill -9 guarantee (a fresh job of 2 ranks, then a warm one of 3):
- kill_mid_save: one step, save DIR/k (k-1), a second step, save again:
  rank 0 sends itself SIGKILL after TF wrote its own part of k-2 and
  before the parts are merged (it prints KILLING first), so the job dies
  mid-save;
- after_kill: the latest checkpoint of DIR is still k-1, and it restores
  (the rows after one step).
"""
import os
import signal
import sys

import numpy as np

from dynamic_keras import (D, GLOBAL, OPTIMIZERS, dynamic_embedding,
                           global_batch, held_here, keras, model_of,
                           my_part, uniform_row)
from train_common import (Checker, check, close,
                          dense_gradient_step, env_rank, env_size,
                          expect_raises, identical_on_all_ranks, report,
                          run_table, tf)

import hbcore_tf as hb  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402

CASES = ["save_at_2", "restore_at_3", "restore_at_2", "kill_mid_save",
         "after_kill"]
LEGACY = keras.__name__ == "tf_keras"


def seen(steps: int) -> np.ndarray:
    """The keys of the first ``steps`` global batches, ascending."""
    return np.unique(np.concatenate([global_batch(k)[0].ravel()
                                     for k in range(steps)]))


def occurrences(steps: int) -> dict:
    """Key -> how many times it occurs in the first ``steps`` global
    batches."""
    keys, counts = np.unique(np.concatenate(
        [global_batch(k)[0].ravel() for k in range(steps)]),
        return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def last_steps(steps: int) -> list:
    """The version of each of seen(steps): the table's step (1-based: its
    count of training lookups) at the key's last training lookup."""
    last = {}
    for step in range(steps):
        for k in global_batch(step)[0].ravel().tolist():
            last[k] = step + 1
    return [last[k] for k in seen(steps).tolist()]


def check_versions(path: str, steps: int) -> None:
    """The checkpoint's ``-versions`` are last_steps(steps)."""
    (versions,) = [v for n, v in table_tensors(path).items()
                   if n.endswith("-versions")]
    check(versions.tolist() == last_steps(steps),
          "%s: versions %s, expected %s" % (path, versions.tolist(),
                                            last_steps(steps)))


def reference(steps: int):
    """Plain Keras after ``steps`` steps: (rows of seen(steps), kernel)."""
    vocab = seen(4)
    table = np.stack([uniform_row(k) for k in vocab]).astype(np.float32)
    model = model_of(keras.layers.Embedding(
        len(vocab), D, embeddings_initializer=keras.initializers.Constant(
            table), name="emb"))
    opt = OPTIMIZERS["adagrad"]()
    for step in range(steps):
        ids, y = global_batch(step)
        dense_gradient_step(model, opt, np.searchsorted(vocab, ids), y)
    rows = model.get_layer("emb").get_weights()[0]
    return rows[np.searchsorted(vocab, seen(steps))], \
        model.get_layer("out").get_weights()[0]


class Trainer:
    """A fresh model (DynamicEmbedding "emb", capacity 16) and its
    optimizer (built unless ``build`` is False: its slots are created
    later, after a restore, which TF then defers to their creation), with
    a tf.train.Checkpoint of both."""

    def __init__(self, build: bool = True) -> None:
        self.layer = hb.keras.layers.DynamicEmbedding(D, name="emb",
                                                      capacity=16)
        self.model = model_of(self.layer)
        self.opt = hvd.DistributedOptimizer(OPTIMIZERS["adagrad"]())
        if build:
            self.build()
        self.checkpoint = tf.train.Checkpoint(model=self.model,
                                              optimizer=self.opt)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.model(x) - y))
            variables = self.model.trainable_variables
            self.opt.apply_gradients(zip(tape.gradient(loss, variables),
                                         variables))
        self._step = step

    def build(self) -> None:
        """Builds the optimizer (creates its slots)."""
        self.opt.build(self.model.trainable_variables)

    def train(self, step: int) -> None:
        ids, y = global_batch(step)
        rank, size = env_rank(), env_size()
        self._step(my_part(ids, rank, size), my_part(y, rank, size))

    def check(self, steps: int, what: str) -> None:
        """Rows of every seen key and the Dense kernel against the
        reference; each rank holds its keys of them."""
        keys = seen(steps)
        held = int(self.layer.table.size())
        rows, kernel = reference(steps)
        close(self.layer(keys), rows, what + ": rows", atol=1e-5)
        close(self.model.get_layer("out").get_weights()[0], kernel,
              what + ": Dense kernel", atol=1e-5)
        want = held_here(keys, env_rank(), env_size())
        check(held == want, "%s: rank %d holds %d rows, expected %d" % (
            what, env_rank(), held, want))


def slot_rows(opt, held: int) -> np.ndarray:
    """The rows of this rank's ``held`` keys in the accumulator slot of
    the table (capacity 16 + the scratch row) among ``opt``'s variables."""
    from hbcore_tf._parallel.data_parallel import _optimizer_variables

    slots = [v for v in _optimizer_variables(opt)
             if tuple(v.shape) == (17, D)]
    check(len(slots) == 1, "accumulator slots: %s" % slots)
    return np.asarray(slots[0])[:held]


def table_tensors(path: str) -> dict:
    """The dynamic table's tensors of a checkpoint (plain TF's reader)."""
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()
            if name.rsplit("/", 1)[-1].startswith("-")}


def main() -> None:
    hvd.init()
    directory, phase = sys.argv[1], sys.argv[2]
    rank = env_rank()
    checker = Checker()

    def save_at_2():
        trainer = Trainer()
        for step in range(2):
            trainer.train(step)
        trainer.check(2, "after 2 steps")
        path = trainer.checkpoint.save(os.path.join(directory, "a"))
        tensors = table_tensors(path)
        names = sorted(name.rsplit("/", 1)[-1] for name in tensors)
        check(names == ["-freqs", "-keys", "-keys", "-values", "-values",
                        "-versions"], "table and slot tensors: %s" % names)
        rows, _ = reference(2)
        for name, value in tensors.items():
            if name.endswith("-keys"):
                check(np.array_equal(value, seen(2)), "%s: %s" % (
                    name, value))
            elif name.endswith("-freqs"):
                # The batches' occurrences, and trainer.check's lookup of
                # every seen key on each of the 2 ranks.
                counts = occurrences(2)
                want = [counts[k] + env_size() for k in seen(2).tolist()]
                check(value.tolist() == want, "%s: %s, expected %s" % (
                    name, value.tolist(), want))
        check_versions(path, 2)
        store = [n[:-len("-freqs")] for n in tensors
                 if n.endswith("-freqs")]
        close(tensors[store[0] + "-values"], rows, "the saved rows")
        trainer.model.save_weights(os.path.join(directory, "w.weights.h5"))
        # Compiled: the .keras file holds the optimizer and its slot too.
        trainer.model.compile(optimizer=trainer.opt, loss="mse")
        trainer.model.save(os.path.join(directory, "m.keras"))

    def restore_at_3():
        trainer = Trainer()
        trainer.checkpoint.restore(os.path.join(directory, "a-1")) \
            .assert_existing_objects_matched()
        trainer.check(2, "restored at 3")
        slots_at_2 = slot_rows(trainer.opt, int(trainer.layer.table.size()))
        again = trainer.checkpoint.save(os.path.join(directory, "a3"))
        before, after = table_tensors(os.path.join(directory, "a-1")), \
            table_tensors(again)
        check(sorted(before) == sorted(after), "tensor names differ")
        for name in before:
            # The check's lookups at 3 ranks counted every key 3 more
            # times; the restored counts are what the counts start from.
            extra = env_size() if name.endswith("-freqs") else 0
            check(np.array_equal(before[name] + extra, after[name]),
                  "%s differs saved at 2 and at 3 ranks" % name)
        trainer.train(2)
        trainer.check(3, "restored at 3, one more step")
        check_versions(trainer.checkpoint.save(os.path.join(directory, "b")),
                       3)
        fresh = Trainer()
        fresh.model.load_weights(os.path.join(directory, "w.weights.h5"))
        close(fresh.layer(seen(2)), reference(2)[0],
              ".weights.h5 restored at 3", atol=1e-5)
        versions = dynamic_embedding.whole_table(fresh.layer.table)[
            "versions"].tolist()
        check(versions == last_steps(2), ".weights.h5's versions at 3: %s,"
              " expected %s" % (versions, last_steps(2)))
        loaded = keras.models.load_model(os.path.join(directory, "m.keras"))
        close(loaded.get_layer("emb")(seen(2)), reference(2)[0],
              ".keras file loaded at 3", atol=1e-5)
        # The optimizer's accumulator, held by key like the table: each
        # rank's rows of its keys, as the tf.train.Checkpoint restored them.
        close(slot_rows(loaded.optimizer, len(slots_at_2)), slots_at_2,
              ".keras file's accumulator loaded at 3")
        # Another kind of checkpoint: a plain variable's (TF names the
        # missing key); with Keras 3, a plain Embedding's .weights.h5 (the
        # layer names the table).
        plain = os.path.join(directory, "plain_%d" % rank)
        tf.train.Checkpoint(v=tf.Variable(tf.zeros([17, D]))).write(plain)
        fresh = Trainer()
        expect_raises(
            lambda: tf.train.Checkpoint(v=fresh.layer.embeddings).read(
                plain), tf.errors.NotFoundError, "v/.ATTRIBUTES/-keys")
        if LEGACY:  # tf_keras' legacy HDF5 stores variables by value
            expect_raises(lambda: fresh.model.save_weights(
                os.path.join(directory, "legacy.h5")), NotImplementedError,
                "emb/embeddings", "tf.train.Checkpoint")
        else:
            fixed = model_of(keras.layers.Embedding(17, D, name="emb"))
            fixed.save_weights(plain + ".weights.h5")
            expect_raises(lambda: fresh.model.load_weights(
                plain + ".weights.h5"), ValueError, "emb", "another kind")
        identical_on_all_ranks([np.arange(3)], "collectives after errors")

    def restore_at_2():
        trainer = Trainer(build=False)
        status = trainer.checkpoint.restore(os.path.join(directory, "b-3"))
        trainer.build()  # the slots' restore was deferred to here
        status.assert_existing_objects_matched()
        trainer.check(3, "restored at 2")
        trainer.train(3)
        trainer.check(4, "restored at 2, one more step")

    def kill_mid_save():
        from hbcore_tf.embedding import save_protocol
        trainer = Trainer()
        trainer.train(0)
        trainer.checkpoint.save(os.path.join(directory, "k"))
        trainer.train(1)

        def die(path, parts):
            if rank == 0:
                print("KILLING rank 0 before merging %s" % path, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        save_protocol.merge_parts = die
        trainer.checkpoint.save(os.path.join(directory, "k"))

    def after_kill():
        latest = tf.train.latest_checkpoint(directory)
        check(latest == os.path.join(directory, "k-1"),
              "latest checkpoint %s, expected k-1" % latest)
        trainer = Trainer()
        trainer.checkpoint.restore(latest).assert_existing_objects_matched()
        trainer.check(1, "restored after the kill")

    table = {"save_at_2": save_at_2, "restore_at_3": restore_at_3,
             "restore_at_2": restore_at_2, "kill_mid_save": kill_mid_save,
             "after_kill": after_kill}
    run_table(checker, table, CASES, skip=[c for c in CASES if c != phase])
    report({"rank": rank, "ok": checker.all_ok, "keras": keras.__name__})
    hb.shutdown()


if __name__ == "__main__":
    main()
