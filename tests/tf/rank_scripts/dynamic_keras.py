"""hb.keras.layers.DynamicEmbedding cases (Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1). Run by tests/tf/test_dynamic_embedding.py under
hbrun at 1, 2 and 3 ranks.

Every expected value is computed here without the code under test:
- initial rows from the per-key formula of docs/embedding.md ("Dynamic
  tables"), written in numpy (splitmix64 on uint64 words);
- which rank holds a key from the same formula (``splitmix64(key) % size``);
- string keys from TF's ``tf.strings.to_hash_bucket_fast`` (plain TF);
- training against plain single-process Keras: ``keras.layers.Embedding``
  over the whole vocabulary, its rows initialised from the formula, trained
  on the whole global batch of every step with dense gradients.
The global batch of a step is the same at every world size (6 examples,
split evenly over 1, 2 or 3 ranks), so the expected values are too; each
rank also reports its trained values, which the test compares across
world sizes.
"""
import os
import tempfile

import numpy as np

from train_common import (Checker, check, close, dense_gradient_step,
                          env_rank, env_size, expect_raises, splitmix64, identical_on_all_ranks,
                          rank_values, report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402
from hbcore_tf.keras import dynamic_embedding  # noqa: E402

keras = _compat.keras_module()

CASES = ["lookup_creates_rows", "normal_initializer", "string_ids",
         "ragged_and_sparse_ids", "fit_sgd", "fit_adagrad", "fit_adam",
         "custom_loop_adagrad", "custom_loop_v1_adagrad",
         "custom_loop_v1_adam", "custom_loop_v1_ftrl",
         "bad_ids_and_arguments", "over_capacity",
         "export_for_serving", "counter_filter", "eviction"]
D = 3          # embedding dimension
F = 2          # ids per example
GLOBAL = 6     # examples per step, all ranks together
STEPS = 3
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
# Keys of every sign and size, so the hash and the int64 <-> uint64 views
# are exercised.
POOL = np.array([0, 1, 2, -1, -(2 ** 63), 2 ** 63 - 1, 10 ** 12, 77,
                 -123456789, 5 * 2 ** 40, 31, 32], np.int64)


# --- the reference's formulas (numpy, on Python ints) -------------------------

def uniforms(key: int, seed: int, count: int) -> np.ndarray:
    base = splitmix64((int(key) & MASK) ^ splitmix64(seed))
    return np.array([(splitmix64(base + (j + 1) * GOLDEN) >> 11) * 2.0 ** -53
                     for j in range(count)])


def uniform_row(key: int, seed: int = 0, low: float = -0.05,
                high: float = 0.05) -> np.ndarray:
    return low + (high - low) * uniforms(key, seed, D)


def normal_row(key: int, seed: int, mean: float, stddev: float
               ) -> np.ndarray:
    u = uniforms(key, seed, 2 * D)
    return mean + stddev * np.sqrt(-2.0 * np.log1p(-u[:D])) * \
        np.cos(2.0 * np.pi * u[D:])


def owner(key: int, size: int) -> int:
    return splitmix64(int(key)) % size


def held_here(keys, rank: int, size: int) -> int:
    """How many of the distinct ``keys`` rank ``rank`` holds."""
    return sum(1 for k in set(int(k) for k in np.ravel(keys))
               if owner(k, size) == rank)


# --- data ----------------------------------------------------------------------

def global_batch(step: int):
    """The step's ids (pool keys, with duplicates) and targets."""
    rng = np.random.default_rng([50, step])
    ids = POOL[rng.integers(0, len(POOL), size=(GLOBAL, F))]
    ids[1, 0] = ids[0, 0]
    return ids, rank_values(60 + step, 0, (GLOBAL, 1))


def my_part(array: np.ndarray, rank: int, size: int) -> np.ndarray:
    per = GLOBAL // size
    return array[rank * per:(rank + 1) * per]


def vocabulary() -> np.ndarray:
    return np.unique(np.concatenate([global_batch(k)[0].ravel()
                                     for k in range(STEPS)]))


def kernel0() -> np.ndarray:
    return 0.5 * rank_values(20, 0, (F * D, 1))


OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.2),
    "adagrad": lambda: keras.optimizers.Adagrad(0.3),
    "adam": lambda: keras.optimizers.Adam(0.05),
    "v1_adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(0.3),
    "v1_adam": lambda: tf.compat.v1.train.AdamOptimizer(0.05),
    "v1_ftrl": lambda: tf.compat.v1.train.FtrlOptimizer(
        0.3, l1_regularization_strength=0.001),
}


def updated_variables(model, opt_name):
    """What the optimizer updates: the model's trainable variables, as
    tf.Variables for a tf.compat.v1 optimizer (Keras 3 wraps them)."""
    variables = model.trainable_variables
    if opt_name.startswith("v1_"):
        variables = [_compat.unwrap_variable(v) for v in variables]
    return variables


def model_of(embedding) -> "keras.Model":
    ids = keras.Input((F,), dtype="int64")
    out = keras.layers.Dense(
        1, name="out",
        kernel_initializer=keras.initializers.Constant(kernel0()))(
            keras.layers.Flatten()(embedding(ids)))
    return keras.Model(ids, out)


def expected_training(opt_name: str):
    """Plain Keras in this process: an Embedding over the vocabulary (ids
    mapped to their rank in it), rows from the formula, the whole batch of
    every step, dense gradients (sparse for tf.compat.v1 optimizers). Returns (table rows in vocabulary order,
    Dense kernel, Dense bias)."""
    vocab = vocabulary()
    table = np.stack([uniform_row(k) for k in vocab]).astype(np.float32)
    model = model_of(keras.layers.Embedding(
        len(vocab), D, embeddings_initializer=keras.initializers.Constant(
            table), name="emb"))
    opt = OPTIMIZERS[opt_name]()
    for step in range(STEPS):
        ids, y = global_batch(step)
        dense_gradient_step(model, opt, np.searchsorted(vocab, ids), y,
                            updated_variables(model, opt_name),
                            dense=not opt_name.startswith("v1_"))
    return [model.get_layer("emb").get_weights()[0]] + \
        model.get_layer("out").get_weights()


def filtered_training(freq: int, lr: float):
    """The numpy dict model of a CounterFilter table under SGD (the Dense
    layer frozen at kernel0, bias 0): every step adds the global batch's
    occurrences to each key's count, a key without a row gets its
    initial row once its count reaches ``freq``, keys without a row read
    zeros and get no update. Returns (counts, rows) dicts."""
    kernel = kernel0().astype(np.float64)
    counts, rows = {}, {}
    for step in range(STEPS):
        ids, y = global_batch(step)
        for k in ids.ravel():
            counts[int(k)] = counts.get(int(k), 0) + 1
        for k in set(int(k) for k in ids.ravel()):
            if counts[k] >= freq and k not in rows:
                rows[k] = uniform_row(k)
        x = np.array([np.concatenate([rows.get(int(k), np.zeros(D))
                                      for k in ex]) for ex in ids])
        g = 2.0 * (x @ kernel - y) / GLOBAL
        grads = {}
        for i, ex in enumerate(ids):
            for f, k in enumerate(int(k) for k in ex):
                if k in rows:
                    grads[k] = grads.get(k, 0.0) + \
                        g[i, 0] * kernel[f * D:(f + 1) * D, 0]
        for k, grad in grads.items():
            rows[k] = rows[k] - lr * grad
    return counts, rows


def evict_batch(step: int):
    """The eviction case's ids and targets: step 0 from POOL[:8], steps
    1-2 from POOL[:4] (so keys of step 0 age), later steps from POOL[2:8]
    (so evicted keys come back)."""
    rng = np.random.default_rng([51, step])
    pool = POOL[:8] if step == 0 else POOL[:4] if step < 3 else POOL[2:8]
    ids = pool[rng.integers(0, len(pool), size=(GLOBAL, F))]
    return ids, rank_values(70 + step, 0, (GLOBAL, 1))


def evicting_training(dead, steps: int, saves, lr: float = 0.3):
    """The numpy dict model of an evicting table under Keras' Adagrad
    (accumulators from 0.1; the Dense layer frozen at kernel0, bias 0):
    step s (0-based) is the table's step s + 1; its lookup gives keys
    without a row their initial row, a fresh accumulator and count 0,
    adds the batch's occurrences to the counts, and sets the version of
    every key it reads to s + 1. After the steps listed in ``saves`` (a
    save), every key for which ``dead(step, version, row)`` holds loses
    its row, accumulator, count and version. Returns one snapshot (rows,
    accumulators, versions, counts: dicts by key) per save, and the
    evicted keys of each save."""
    kernel = kernel0().astype(np.float64)
    rows, accs, versions, counts = {}, {}, {}, {}
    snapshots, evicted = [], []
    for step in range(steps):
        ids, y = evict_batch(step)
        for k in (int(k) for k in ids.ravel()):
            if k not in rows:
                rows[k], accs[k], counts[k] = uniform_row(k), \
                    np.full(D, 0.1), 0
            counts[k] += 1
            versions[k] = step + 1
        x = np.array([np.concatenate([rows[int(k)] for k in ex])
                      for ex in ids])
        g = 2.0 * (x @ kernel - y) / GLOBAL
        grads = {}
        for i, ex in enumerate(ids):
            for f, k in enumerate(int(k) for k in ex):
                grads[k] = grads.get(k, 0.0) + \
                    g[i, 0] * kernel[f * D:(f + 1) * D, 0]
        for k, grad in grads.items():
            accs[k] = accs[k] + grad * grad
            rows[k] = rows[k] - lr * grad / np.sqrt(accs[k] + 1e-7)
        if step + 1 in saves:
            gone = sorted(k for k in rows
                          if dead(step + 1, versions[k], rows[k]))
            for k in gone:
                for state in (rows, accs, versions, counts):
                    del state[k]
            evicted.append(gone)
            snapshots.append(tuple(dict(d) for d in (rows, accs, versions,
                                                     counts)))
    return snapshots, evicted


def main() -> None:
    hvd.init()
    rank, size = env_rank(), env_size()
    checker = Checker()
    trained = {}
    exported = {}  # export_for_serving's SavedModel and probe

    def dynamic(name, **kwargs):
        return hb.keras.layers.DynamicEmbedding(D, name=name, **kwargs)

    def lookup_creates_rows():
        layer = dynamic("rows", capacity=16)
        ids = my_part(global_batch(0)[0], rank, size)
        close(layer(ids), [[uniform_row(k) for k in row] for row in ids],
              "first lookup: rows from the per-key formula")
        everyone = global_batch(0)[0]
        check(int(layer.table.size()) == held_here(everyone, rank, size),
              "rank %d holds %d rows, expected %d" % (
                  rank, int(layer.table.size()),
                  held_here(everyone, rank, size)))
        # A second lookup finds the rows: no new row, the same values.
        close(layer(ids[::-1]), [[uniform_row(k) for k in row]
                                 for row in ids[::-1]], "second lookup")
        check(int(layer.table.size()) == held_here(everyone, rank, size),
              "a second lookup of the same keys created rows")

    def normal_initializer():
        layer = dynamic("normal", embeddings_initializer=keras.initializers
                        .RandomNormal(mean=0.5, stddev=2.0, seed=7))
        ids = POOL[rank::size]
        close(layer(ids), [normal_row(k, 7, 0.5, 2.0) for k in ids],
              "RandomNormal rows", rtol=1e-5, atol=1e-5)

    def string_ids():
        layer = dynamic("words", key_dtype="string")
        words = np.array(["apple", "", "pear", "apple", "fig %d" % rank])
        keys = tf.strings.to_hash_bucket_fast(words, 2 ** 63 - 1).numpy()
        close(layer(words), [uniform_row(k) for k in keys],
              "string ids: rows of their fingerprints")
        every = tf.strings.to_hash_bucket_fast(
            ["apple", "", "pear"] + ["fig %d" % r for r in range(size)],
            2 ** 63 - 1).numpy()
        check(int(layer.table.size()) == held_here(every, rank, size),
              "string table: rank %d holds %d rows, expected %d" % (
                  rank, int(layer.table.size()),
                  held_here(every, rank, size)))

    def ragged_and_sparse_ids():
        rows = [[POOL[1], POOL[4], POOL[1]], [], [POOL[rank + 2]]]
        ragged = tf.ragged.constant(rows, dtype=tf.int64)
        want = [[uniform_row(k) for k in bag] for bag in rows]
        plain = dynamic("bags")
        got = plain(ragged)
        check(isinstance(got, tf.RaggedTensor), "ragged ids without a "
              "combiner give a RaggedTensor, got %s" % type(got).__name__)
        for bag, expected in zip(got.to_list(), want):
            close(np.reshape(bag, (-1, D)), np.reshape(expected, (-1, D)),
                  "ragged rows")
        sparse = ragged.to_sparse()
        for combiner in ("sum", "mean", "sqrtn"):
            layer = dynamic("bags_" + combiner, combiner=combiner)

            def reduce(bag):
                if not bag:
                    return np.zeros(D)
                total = np.sum(bag, axis=0)
                return {"sum": total, "mean": total / len(bag),
                        "sqrtn": total / np.sqrt(len(bag))}[combiner]
            expected = [reduce(bag) for bag in want]
            close(layer(ragged), expected, "ragged, " + combiner)
            close(layer(sparse), expected, "sparse, " + combiner)

    def fit(opt_name):
        layer = dynamic("emb_" + opt_name, capacity=16)
        model = model_of(layer)
        model.compile(optimizer=hvd.DistributedOptimizer(
            OPTIMIZERS[opt_name]()), loss="mse")
        xs, ys = zip(*[global_batch(k) for k in range(STEPS)])
        x = np.concatenate([my_part(a, rank, size) for a in xs])
        y = np.concatenate([my_part(a, rank, size) for a in ys])
        model.fit(x, y, batch_size=GLOBAL // size, epochs=1, shuffle=False,
                  verbose=0)
        check_trained(model, layer, expected_training(opt_name), opt_name)

    def check_trained(model, layer, expected, what):
        vocab = vocabulary()
        got = [layer(vocab).numpy()] + model.get_layer("out").get_weights()
        identical_on_all_ranks(got, what)
        for i, (a, b) in enumerate(zip(got, expected)):
            close(a, b, "%s: weight %d" % (what, i), rtol=1e-5, atol=1e-5)
        check(int(layer.table.size()) == held_here(vocab, rank, size),
              "%s: rank %d holds %d rows" % (what, rank,
                                             int(layer.table.size())))
        trained[what] = [np.asarray(a).tolist() for a in got]

    def custom_loop(opt_name):
        """A tf.function loop: hvd.DistributedOptimizer around a Keras
        optimizer, or a tf.compat.v1 optimizer under
        hb.DistributedGradientTape."""
        layer = dynamic("emb_loop_" + opt_name, capacity=16)
        model = model_of(layer)
        v1 = opt_name.startswith("v1_")
        opt = OPTIMIZERS[opt_name]()
        if not v1:
            opt = hvd.DistributedOptimizer(opt)
        variables = updated_variables(model, opt_name)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            if v1:
                tape = hb.DistributedGradientTape(tape)
            opt.apply_gradients(zip(tape.gradient(loss, variables),
                                    variables))

        for k in range(STEPS):
            ids, y = global_batch(k)
            step(my_part(ids, rank, size), my_part(y, rank, size))
        check_trained(model, layer, expected_training(opt_name),
                      "loop_" + opt_name)

    def bad_ids_and_arguments():
        ints = dynamic("ints")
        expect_raises(lambda: ints(np.array([1.5], np.float32)), TypeError,
                      "ints", "key_dtype is int64", "float32")
        expect_raises(lambda: ints(np.array(["a"])), TypeError, "ints",
                      "string")
        words = dynamic("words_only", key_dtype="string")
        expect_raises(lambda: words(np.array([3], np.int64)), TypeError,
                      "words_only", "key_dtype is string", "int64")
        expect_raises(lambda: dynamic("f", key_dtype="float32"), ValueError,
                      "key_dtype", "float32")
        expect_raises(lambda: dynamic("g", embeddings_initializer="glorot_"
                                      "uniform"), ValueError, "g",
                      "GlorotUniform", "per-key")
        expect_raises(lambda: dynamic("h", combiner="max"), ValueError,
                      "combiner 'max'")
        expect_raises(lambda: dynamic("e", ev_option=object()),
                      TypeError, "'e'", "hb.EmbeddingVariableOption",
                      "object")
        expect_raises(lambda: dynamic("ff", ev_option=hb.
                                      EmbeddingVariableOption(
                                          filter_option=hb.CounterFilter(
                                              filter_freq="3"))),
                      TypeError, "'ff'", "filter_freq must be an int", "'3'")
        expect_raises(lambda: dynamic("fn", ev_option=hb.
                                      EmbeddingVariableOption(
                                          filter_option=hb.CounterFilter(-1))),
                      ValueError, "'fn'", "filter_freq must be >= 0")
        def evicting(name, evict):
            return dynamic(name, ev_option=hb.EmbeddingVariableOption(
                evict_option=evict))
        expect_raises(lambda: evicting("ev_s", hb.GlobalStepEvict("5")),
                      TypeError, "'ev_s'", "steps_to_live must be an int",
                      "'5'")
        expect_raises(lambda: evicting("ev_n", hb.GlobalStepEvict(-2)),
                      ValueError, "'ev_n'", "steps_to_live must be >= 0",
                      "-2")
        expect_raises(lambda: evicting("ev_l", hb.L2WeightEvict("0.1")),
                      TypeError, "'ev_l'", "l2_weight_threshold must be a "
                      "number")
        expect_raises(lambda: evicting("ev_o", hb.CounterFilter(2)),
                      TypeError, "'ev_o'", "evict_option", "CounterFilter")
        expect_raises(lambda: hb.keras.layers.ShardedEmbedding(
            10, D, name="fixed_table", ev_option=hb.EmbeddingVariableOption(
                filter_option=hb.CounterFilter(2))), ValueError,
            "'fixed_table'", "ev_option", "DynamicEmbedding")
        # An elastic commit would hold a dynamic table's rows without
        # their keys: the state refuses it, naming the table.
        ids = keras.Input((1,), dtype="int64")
        model = keras.Model(ids, dynamic("elastic_dyn")(ids))
        expect_raises(lambda: hvd.elastic.TensorFlowKerasState(model),
                      NotImplementedError, "TensorFlowKerasState",
                      "elastic_dyn", "cannot be committed")
        expect_raises(lambda: hb.elastic.TensorFlowState(
            model.weights), NotImplementedError, "TensorFlowState",
            "elastic_dyn")

    def over_capacity():
        # Two new keys for every rank, one row each: every rank's lookup
        # fails naming the table, after both exchanges (nobody hangs).
        keys, count = [], [0] * size
        for k in range(1000, 2000):
            if count[owner(k, size)] < 2:
                keys.append(k)
                count[owner(k, size)] += 1
        layer = dynamic("tiny", capacity=1)
        expect_raises(lambda: layer(np.array(keys, np.int64)),
                      tf.errors.InvalidArgumentError, "tiny",
                      "capacity of 1 rows", "capacity= argument")
        identical_on_all_ranks([np.arange(3)], "collectives after the error")
        # Only the last rank overflows, and only rank 0 looks its keys
        # up; every rank still fails, naming the table and that rank.
        last = [k for k in range(1000, 2000) if owner(k, size) == size - 1]
        mine = last[:2] if rank == 0 else []
        one = dynamic("one_full", capacity=1)
        expect_raises(lambda: one(np.array(mine, np.int64)),
                      tf.errors.InvalidArgumentError, "one_full",
                      "rank %d holds its capacity of 1 rows" % (size - 1))
        identical_on_all_ranks([np.arange(3)], "collectives after the error")

    def export_for_serving():
        """A model with an int64 DynamicEmbedding and a string bag,
        trained one step, exported by export_plain_model and saved as a
        SavedModel by every rank (its own copy: no rank waits on another
        while TF writes); on seen and unseen ids the plain model predicts
        what the trained one does, unseen ids read their initial rows
        (the numpy formula). The test serves rank 0's copy with plain TF
        (test_export_served_by_plain_tf). 3-11 s on the shared 2-core
        machine: Keras traces fit and the SavedModel's functions."""
        ids_in = keras.Input((F,), dtype="int64", name="ids")
        words_in = keras.Input((None,), dtype="string", name="words")
        flat = keras.layers.Flatten()(dynamic("served_ids")(ids_in))
        bag = dynamic("served_words", key_dtype="string",
                      combiner="sum")(words_in)
        out = keras.layers.Dense(
            1, name="out", kernel_initializer=keras.initializers.Constant(
                0.5 * rank_values(21, 0, (F * D + D, 1))))(
                    keras.layers.Concatenate()([flat, bag]))
        model = keras.Model([ids_in, words_in], out)
        model.compile(optimizer=hvd.DistributedOptimizer(
            keras.optimizers.Adagrad(0.3)), loss="mse")
        ids, y = global_batch(0)
        words = np.array([["w%d" % (k % 4), "v%d" % (k % 3)]
                          for k in range(GLOBAL)])
        model.fit([tf.constant(my_part(ids, rank, size)),
                   tf.constant(my_part(words, rank, size))],
                  my_part(y, rank, size), batch_size=GLOBAL // size,
                  epochs=1, shuffle=False, verbose=0)
        # Seen ids (rows 0-1), unseen ones (row 2), a mix (row 3); the
        # trained model gives a new key its initial row, as served.
        unseen = [999, -(2 ** 40)]
        probe_ids = np.array([ids[0], ids[3], unseen, [ids[1, 1], 5]],
                             np.int64)
        probe_words = np.array([["w0", "v1"], ["w3", "new"], ["x", "y"],
                                ["v2", "w1"]])
        probe = [tf.constant(probe_ids), tf.constant(probe_words)]
        plain = hb.keras.layers.export_plain_model(model)   # collective
        want = model(probe).numpy()
        kinds = sorted(type(layer).__name__ for layer in plain.layers)
        check(kinds.count("ServedDynamicEmbedding") == 2,
              "exported layers: %s" % kinds)
        check(np.array_equal(plain(probe).numpy(), want),
              "plain model %s, trained model %s" % (
                  plain(probe).numpy().tolist(), want.tolist()))
        kernel, bias = model.get_layer("out").get_weights()
        words_row = model.get_layer("served_words")(
            tf.constant(probe_words[2:3])).numpy()[0]
        initial = np.concatenate([uniform_row(k) for k in unseen] +
                                 [words_row])
        close(want[2], initial @ kernel + bias,
              "trained model on unseen ids: initial rows")
        folder = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_dynexp_") if rank == 0 else None, 0)
        path = os.path.join(folder, "sm_%d" % rank)
        tf.saved_model.save(plain, path)
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            check(b"Hbcore" not in f.read(), "hbcore ops in the SavedModel")
        exported.update({"path": path, "ids": probe_ids.tolist(),
                         "words": probe_words.tolist(),
                         "want": want.tolist()})

    def counter_filter():
        """CounterFilter(2) at every world size against the numpy dict
        model: the first lookup (counts over all ranks' ids), then three
        SGD steps: which keys have rows, their values and counts (the
        whole table, as saved), rows per rank, and the exported layer
        (keys without a row read 0)."""
        def filtered(name):
            return dynamic(name, capacity=16, ev_option=hb.
                           EmbeddingVariableOption(
                               filter_option=hb.CounterFilter(filter_freq=2)))
        first = filtered("filtered_first")
        ids = global_batch(0)[0]
        seen = {}
        for k in ids.ravel():
            seen[int(k)] = seen.get(int(k), 0) + 1
        close(first(my_part(ids, rank, size)),
              [[uniform_row(k) if seen[int(k)] >= 2 else np.zeros(D)
                for k in ex] for ex in my_part(ids, rank, size)],
              "first lookup: keys seen twice in all ranks' ids get rows")
        layer = filtered("filtered")
        model = model_of(layer)
        model.get_layer("out").trainable = False
        model.compile(optimizer=hvd.DistributedOptimizer(
            keras.optimizers.SGD(0.2)), loss="mse")
        xs, ys = zip(*[global_batch(k) for k in range(STEPS)])
        model.fit(np.concatenate([my_part(a, rank, size) for a in xs]),
                  np.concatenate([my_part(a, rank, size) for a in ys]),
                  batch_size=GLOBAL // size, epochs=1, shuffle=False,
                  verbose=0)
        counts, rows = filtered_training(2, 0.2)
        admitted = sorted(rows)
        check(0 < len(admitted) < len(counts),
              "the data admits some keys and not others: %d of %d" % (
                  len(admitted), len(counts)))
        whole = dynamic_embedding.whole_table(layer.table)
        check(whole["keys"].tolist() == admitted,
              "keys with rows %s, expected %s" % (whole["keys"].tolist(),
                                                  admitted))
        check(whole["freqs"].tolist() == [counts[k] for k in admitted],
              "freqs %s, expected %s" % (whole["freqs"].tolist(),
                                         [counts[k] for k in admitted]))
        close(whole["values"], [rows[k] for k in admitted],
              "trained rows", rtol=1e-5, atol=1e-6)
        check(int(layer.table.size()) == held_here(admitted, rank, size),
              "rank %d holds %d rows, expected %d" % (
                  rank, int(layer.table.size()),
                  held_here(admitted, rank, size)))
        plain = hb.keras.layers.export_plain_model(model)
        probe = np.array(sorted(counts) + [4242], np.int64)
        close(plain.get_layer("filtered")(probe),
              [rows.get(int(k), np.zeros(D)) for k in probe],
              "exported layer: rows, and 0 for keys without one")

    def eviction():
        """GlobalStepEvict(1) and L2WeightEvict against the numpy dict
        model (evicting_training), Adagrad under model.train_on_batch:
        a tf.train.Checkpoint save after step 3 evicts, and the
        checkpoint holds exactly the surviving keys, their rows, slots,
        counts and versions; rows per rank drop; evicted keys seen again
        get their initial rows and fresh accumulators (the rows after
        two more steps, read by whole_table, which evicts again)."""
        def trained(name, evict, steps, saves):
            layer = dynamic(name, capacity=16, ev_option=hb.
                            EmbeddingVariableOption(evict_option=evict))
            model = model_of(layer)
            model.get_layer("out").trainable = False
            model.compile(optimizer=hvd.DistributedOptimizer(
                keras.optimizers.Adagrad(0.3)), loss="mse")
            for step in range(steps):
                ids, y = evict_batch(step)
                model.train_on_batch(my_part(ids, rank, size),
                                     my_part(y, rank, size))
                if step + 1 in saves:
                    yield layer, model

        def check_whole(layer, snapshot, what):
            rows, _, versions, counts = snapshot
            keys = sorted(rows)
            whole = dynamic_embedding.whole_table(layer.table)
            check(whole["keys"].tolist() == keys, "%s: keys %s, expected "
                  "%s" % (what, whole["keys"].tolist(), keys))
            for name, want in (("versions", versions), ("freqs", counts)):
                check(whole[name].tolist() == [want[k] for k in keys],
                      "%s: %s %s, expected %s" % (
                          what, name, whole[name].tolist(),
                          [want[k] for k in keys]))
            close(whole["values"], [rows[k] for k in keys], what + ": rows",
                  atol=1e-5)
            check(int(layer.table.size()) == held_here(keys, rank, size),
                  "%s: rank %d holds %d rows, expected %d" % (
                      what, rank, int(layer.table.size()),
                      held_here(keys, rank, size)))

        snapshots, evicted = evicting_training(
            lambda step, version, row: step - version > 1, 5, (3, 5))
        check(evicted[0] and set(evicted[0]) & set(snapshots[1][0]),
              "the data evicts keys that come back: %s" % evicted)
        folder = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_dynevict_") if rank == 0 else None,
            0)
        steps = trained("by_step", hb.GlobalStepEvict(steps_to_live=1), 5,
                        (3, 5))
        layer, model = next(steps)
        path = tf.train.Checkpoint(model=model, optimizer=model.optimizer) \
            .save(os.path.join(folder, "evicted"))
        reader = tf.train.load_checkpoint(path)
        saved = {name: reader.get_tensor(name)
                 for name in reader.get_variable_to_shape_map()
                 if name.rsplit("/", 1)[-1].startswith("-")}
        rows, accs, versions, counts = snapshots[0]
        keys = sorted(rows)
        store = [n[:-len("-freqs")] for n in saved if n.endswith("-freqs")]
        check(len(store) == 1 and len(saved) == 6,
              "saved tensors: %s" % sorted(saved))
        want = {"-keys": keys, "-versions": [versions[k] for k in keys],
                "-freqs": [counts[k] for k in keys]}
        for name, value in saved.items():
            suffix = "-" + name.rsplit("-", 1)[-1]
            if suffix in want:
                check(value.tolist() == want[suffix], "%s: %s, expected %s"
                      % (name, value.tolist(), want[suffix]))
            elif name.startswith(store[0]):
                close(value, [rows[k] for k in keys], name, atol=1e-5)
            else:
                close(value, [accs[k] for k in keys], name, atol=1e-5)
        check(int(layer.table.size()) == held_here(keys, rank, size),
              "rank %d holds %d rows after the save, expected %d" % (
                  rank, int(layer.table.size()), held_here(keys, rank, size)))
        layer, _ = next(steps)
        check_whole(layer, snapshots[1], "GlobalStepEvict, 2 steps later")
        # L2WeightEvict: the threshold halfway across the widest gap among
        # the middle half of the rows' L2 weights after 3 steps.
        plain = evicting_training(lambda *_: False, 3, (3,))[0][0][0]
        weights = np.sort([0.5 * np.sum(r * r) for r in plain.values()])
        middle = weights[len(weights) // 4:3 * len(weights) // 4 + 1]
        gap = int(np.argmax(np.diff(middle)))
        threshold = float(middle[gap] + middle[gap + 1]) / 2
        snapshots, evicted = evicting_training(
            lambda step, version, row: 0.5 * np.sum(row * row) < threshold,
            4, (3, 4))
        check(evicted[0], "L2WeightEvict(%g) evicts: %s" % (threshold,
                                                           evicted))
        steps = trained("by_l2", hb.L2WeightEvict(threshold), 4, (3, 4))
        for snapshot, when in zip(snapshots, ("after 3 steps", "after 4")):
            check_whole(next(steps)[0], snapshot, "L2WeightEvict " + when)

    table = {
        "lookup_creates_rows": lookup_creates_rows,
        "normal_initializer": normal_initializer,
        "string_ids": string_ids,
        "ragged_and_sparse_ids": ragged_and_sparse_ids,
        "fit_sgd": lambda: fit("sgd"),
        "fit_adagrad": lambda: fit("adagrad"),
        "fit_adam": lambda: fit("adam"),
        "custom_loop_adagrad": lambda: custom_loop("adagrad"),
        "custom_loop_v1_adagrad": lambda: custom_loop("v1_adagrad"),
        "custom_loop_v1_adam": lambda: custom_loop("v1_adam"),
        "custom_loop_v1_ftrl": lambda: custom_loop("v1_ftrl"),
        "bad_ids_and_arguments": bad_ids_and_arguments,
        "over_capacity": over_capacity,
        "export_for_serving": export_for_serving,
        "counter_filter": counter_filter,
        "eviction": eviction,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__, "trained": trained,
            "exported": exported})
    hb.shutdown()


if __name__ == "__main__":
    main()
