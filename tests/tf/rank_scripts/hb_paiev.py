"""emb_backend='PAIEV' (HybridBackend's backend over DeepRec's
EmbeddingVariable, here hbcore's dynamic tables) and DeepRec's
hb.get_embedding_variable, at any rank count (run by
tests/tf/test_hb_paiev.py under hbrun).

The ``hb_*`` cases are HybridBackend's own PAIEV tests
(hybridbackend/tensorflow/embedding/paiev/tests/paiev_test.py) with the
import swapped (``import hbcore_tf as hb``) and TensorFlow 1's names
spelled ``tf.compat.v1`` (V1 here); each asserts what HybridBackend's
test asserts, on every rank. The other cases check values against a
numpy model: a dict from id to row, rows created on first sight with the
per-key formula of docs/embedding.md ("Dynamic tables"), trained on every
rank's batch (gradients averaged over the ranks, as hbcore does).
"""
import sys
import tempfile

import hbcore
import numpy as np

from train_common import (check, Checker, close, expect_raises, report,
                          run_table, splitmix64, tf)

import hbcore_tf as hb  # noqa: E402
from hbcore_tf.embedding import embedding_variable  # noqa: E402

V1 = tf.compat.v1
FC = tf.feature_column

CASES = ["hb_get_dense_tensor", "hb_get_dense_tensor_with_varscope",
         "hb_embedding_column_with_optimizer",
         "hb_get_dense_tensor_disable_concat",
         "hb_embedding_column_with_coalescing",
         "hb_embedding_column_with_function",
         "hb_embedding_column_with_function_unique",
         "hb_get_dense_tensor_with_segment_rank",
         "hb_shared_embedding_column",
         "dense_features_adagrad_matches_dict_model",
         "embedding_variable_counter_filter_matches_dict_model",
         "truncated_normal_default_rows", "paiev_enabled_per_column",
         "categorical_column_with_embedding_strings",
         "saver_checkpoint_matches_dict_model", "errors"]
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
HB_LOSS, HB_SHARED_LOSS = 0.999929, 0.999923
HB_ROWS = [[1., 1.], [1., 1.], [0., 0.], [1., 1.]]
# Keys far beyond any row count (the ids a dynamic table is for).
POOL = np.array([2 ** 40 + 17 * i for i in range(9)] + [3, 2 ** 62 + 5],
                np.int64)


# --- HybridBackend's tests, import swapped -------------------------------

def _ones():
    return V1.ones_initializer(tf.float32)


def _four_columns(shared=False):
    dims = {"ad0": 20, "ad1": 30, "ad2": 40, "user0": 20}
    keys = ["ad1", "ad2"] if shared else list(dims)
    columns = [FC.embedding_column(
        FC.categorical_column_with_identity(key, num_buckets=sys.maxsize),
        dimension=dims[key], initializer=_ones()) for key in keys]
    if shared:
        columns += V1.feature_column.shared_embedding_columns(
            [FC.categorical_column_with_identity(key="ad0",
                                                 num_buckets=sys.maxsize),
             FC.categorical_column_with_identity(key="user0",
                                                 num_buckets=sys.maxsize)],
            dimension=20, initializer=_ones())
    return columns


def _four_features():
    return {"ad0": tf.constant([0, 1, 3, 2]),
            "ad1": tf.constant([1, 5, 3, 4]),
            "ad2": tf.constant([5, 2, 7, 4]),
            "user0": tf.constant([2, 5, 4, 7])}


def _aaa_lookup():
    emb_col = FC.embedding_column(
        FC.categorical_column_with_identity("aaa", num_buckets=sys.maxsize),
        2, initializer=_ones(), combiner="mean")
    sparse_input = tf.sparse.SparseTensor(
        values=[2, 0, 1, 1], indices=[[0, 0], [1, 0], [1, 4], [3, 0]],
        dense_shape=[4, 5])
    return hb.keras.layers.DenseFeatures([emb_col])({"aaa": sparse_input})


def _train_100_steps(loss, train_op, step=None, hooks=()):
    final_loss = None
    tensors = {"loss": loss} if step is None else {"loss": loss,
                                                   "step": step}
    with hb.train.monitored_session(hooks=list(hooks) + [
            V1.train.StopAtStepHook(last_step=100),
            V1.train.NanTensorHook(loss),
            V1.train.LoggingTensorHook(tensors=tensors,
                                       every_n_iter=20)]) as sess:
        while not sess.should_stop():
            final_loss = sess.run(loss)
            sess.run(train_op)
    return final_loss


def _adagrad_final_loss(out_emb, session_hook):
    """HybridBackend's training: loss = mean of the outputs, Adagrad(1e-4),
    100 steps in hb.train's session; returns the last step's loss."""
    loss = tf.reduce_mean(out_emb)
    opt = V1.train.AdagradOptimizer(0.0001)
    step = V1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=step)
    return _train_100_steps(loss, train_op, step, [
        opt.make_session_run_hook()] if session_hook else [])


def hb_get_dense_tensor():
    """HybridBackend's test_get_dense_tensor and
    test_get_dense_tensor_sharded (the same script, 1 and 2 ranks)."""
    with tf.Graph().as_default():
        with hb.scope(emb_backend="PAIEV", emb_device="/cpu:0"):
            embedding_lookup = _aaa_lookup()
            with hb.train.monitored_session() as sess:
                close(sess.run(embedding_lookup), HB_ROWS, "rows")


def hb_get_dense_tensor_with_varscope():
    with tf.Graph().as_default():
        with hb.scope(emb_backend="PAIEV", emb_device="/cpu:0"):
            partitioner = V1.min_max_variable_partitioner(
                max_partitions=2, min_slice_size=4)
            with V1.variable_scope("test", partitioner=partitioner):
                embedding_lookup = _aaa_lookup()
                with hb.train.monitored_session() as sess:
                    close(sess.run(embedding_lookup), HB_ROWS, "rows")


def hb_embedding_column_with_optimizer():
    with tf.Graph().as_default():
        with hb.scope(seed=42, emb_backend="PAIEV", emb_device="/cpu:0"):
            out_emb = hb.keras.layers.DenseFeatures(
                _four_columns(), num_groups=None)(_four_features())
            close(_adagrad_final_loss(out_emb, session_hook=True), HB_LOSS,
                  "final loss", rtol=1e-6)


def hb_get_dense_tensor_disable_concat():
    with tf.Graph().as_default():
        with hb.scope(emb_enable_concat=False, emb_backend="PAIEV",
                      emb_device="/cpu:0"):
            columns = [c for c in _four_columns()
                       if c.categorical_column.key in ("ad0", "user0")]
            features = {
                "ad0": tf.sparse.SparseTensor(
                    values=[0, 1, 3, 2],
                    indices=[[0, 0], [0, 1], [1, 0], [1, 1]],
                    dense_shape=[2, 2]),
                "user0": tf.constant([2, 5, 4, 7])}
            embs = hb.keras.layers.DenseFeatures(columns)(features)
            with hb.train.monitored_session() as sess:
                check(len(sess.run(embs)) == 2, "outputs %r" % (embs,))


def hb_embedding_column_with_coalescing():
    with tf.Graph().as_default():
        with hb.scope(seed=42, emb_backend="PAIEV", emb_device="/cpu:0"):
            out_emb = hb.keras.layers.DenseFeatures(
                _four_columns(), num_groups=2)(_four_features())
            close(_adagrad_final_loss(out_emb, session_hook=False), HB_LOSS,
                  "final loss", rtol=1e-6)


def _function_case(**options):
    @hb.function(seed=42, emb_num_groups=2, emb_backend="PAIEV",
                 emb_device="/cpu:0", **options)
    def train_fn():
        out_emb = hb.keras.layers.DenseFeatures(_four_columns())(
            _four_features())
        loss = tf.reduce_mean(out_emb)
        opt = V1.train.AdagradOptimizer(0.0001)
        step = V1.train.get_or_create_global_step()
        return loss, opt.minimize(loss, global_step=step)

    # Called eagerly, as HybridBackend's test does: built in the default
    # graph, which the session opens on.
    V1.reset_default_graph()
    try:
        loss, train_op = train_fn()
        close(_train_100_steps(loss, train_op), HB_LOSS, "final loss",
              rtol=1e-6)
    finally:
        V1.reset_default_graph()


def hb_embedding_column_with_function():
    _function_case()


def hb_embedding_column_with_function_unique():
    _function_case(emb_unique={"ad0": True})


def hb_get_dense_tensor_with_segment_rank():
    @hb.function(emb_segment_rank={"aaa": 1}, emb_backend="PAIEV",
                 emb_device="/cpu:0")
    def lookup_fn():
        sparse_input = tf.sparse.SparseTensor(
            values=[2, 0, 1, 1],
            indices=[[0, 1, 1], [0, 1, 2], [1, 1, 1], [1, 1, 2]],
            dense_shape=[4, 2, 3])
        emb_col = FC.embedding_column(
            FC.categorical_column_with_identity("aaa",
                                                num_buckets=sys.maxsize),
            2, initializer=_ones(), combiner="mean")
        return hb.keras.layers.DenseFeatures([emb_col])(
            {"aaa": sparse_input})

    with tf.Graph().as_default():
        embs = lookup_fn()
        with hb.train.monitored_session() as sess:
            close(sess.run(embs), [[0., 0.], [1., 1.], [0., 0.], [1., 1.],
                                   [0., 0.], [0., 0.], [0., 0.], [0., 0.]],
                  "segment rows")


def hb_shared_embedding_column():
    with tf.Graph().as_default():
        with hb.scope(seed=42, emb_backend="PAIEV", emb_device="/cpu:0"):
            out_emb = hb.keras.layers.DenseFeatures(
                _four_columns(shared=True))(_four_features())
            close(_adagrad_final_loss(out_emb, session_hook=True),
                  HB_SHARED_LOSS, "final loss", rtol=1e-6)


# --- the numpy dict model ------------------------------------------------

def uniforms(key, seed, count):
    """The per-key uniforms of docs/embedding.md ("Dynamic tables")."""
    base = splitmix64((int(key) & MASK) ^ splitmix64(seed))
    return np.array([(splitmix64(base + (j + 1) * GOLDEN) >> 11) * 2.0 ** -53
                     for j in range(count)])


def uniform_row(key, seed, low, high, dim):
    return low + (high - low) * uniforms(key, seed, dim)


def normal_row(key, seed, mean, stddev, dim):
    u = uniforms(key, seed, 2 * dim)
    return mean + stddev * np.sqrt(-2.0 * np.log1p(-u[:dim])) * \
        np.cos(2.0 * np.pi * u[dim:])


def truncated_row(key, stddev, dim, tries=8):
    """The first of ``tries`` Box-Muller normals within 2 (per value)."""
    u = uniforms(key, 0, 2 * tries * dim).reshape(2, tries, dim)
    z = np.sqrt(-2.0 * np.log1p(-u[0])) * np.cos(2.0 * np.pi * u[1])
    first = np.argmax(np.abs(z) <= 2.0, axis=0)
    return stddev * np.clip(z[first, np.arange(dim)], -2.0, 2.0)


def owner(key, size):
    return splitmix64(int(key)) % size


def batch_ids(step, rank, shape):
    rng = np.random.default_rng([4100 + step, rank])
    return POOL[rng.integers(0, len(POOL) - 2, size=shape)]


def targets(step, rank, shape):
    rng = np.random.default_rng([4200 + step, rank])
    return rng.uniform(-1.0, 1.0, size=shape)




def main():
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)

    def dense_features_adagrad_matches_dict_model():
        """hb.dense_features over raw_categorical_column under PAIEV,
        trained by tf.compat.v1 Adagrad in hb.train's session, gives the
        numpy dict model's rows; ids never seen read their initial rows;
        each rank holds exactly the keys it owns (mix(key) % size)."""
        dim, batch, steps, lr = 3, 4, 3, 0.5
        low, high, seed = -0.5, 0.5, 7
        rows, acc = {}, {}

        def row(key):
            if key not in rows:
                rows[key] = uniform_row(key, seed, low, high, dim)
                acc[key] = np.full(dim, 0.1)
            return rows[key]

        for step in range(steps):
            grads = {}
            for r in range(size):
                ids = batch_ids(step, r, (batch, 2))
                t = targets(step, r, (batch, dim))
                for i in range(batch):
                    for key in ids[i]:
                        row(int(key))
                        grads[int(key)] = grads.get(int(key), 0) + \
                            t[i] / batch / size
            for key, g in grads.items():
                acc[key] += g * g
                rows[key] = rows[key] - lr * g / np.sqrt(acc[key])
        query = np.array([[POOL[0], POOL[-1]], [POOL[-2], POOL[3]]],
                         np.int64)
        want = np.stack([row(int(a)) + row(int(b)) for a, b in query])

        with tf.Graph().as_default():
            ids = V1.placeholder(tf.int64, [None, 2])
            t = V1.placeholder(tf.float64, [None, dim])
            col = FC.embedding_column(
                hb.feature_column.raw_categorical_column("user"), dim,
                combiner="sum", initializer=V1.random_uniform_initializer(
                    low, high, seed=seed))
            with hb.scope(emb_backend="PAIEV"):
                out, = hb.dense_features({"user": ids}, [col])
                loss = tf.reduce_sum(tf.cast(out, tf.float64) * t) / batch
                train = V1.train.AdagradOptimizer(lr).minimize(loss)
            store = [v for v in V1.global_variables()
                     if v.name.endswith("embedding_weights:0")]
            table = embedding_variable.table_of(store[0])
            check(len(store) == 1 and table is not None,
                  "no dynamic table: %s" % V1.global_variables())
            held, _ = table.held()
            with hb.train.monitored_session() as sess:
                for step in range(steps):
                    sess.run(train, {ids: batch_ids(step, rank, (batch, 2)),
                                     t: targets(step, rank, (batch, dim))})
                got = sess.run(out, {ids: query})
                mine = sorted(int(k) for k in sess.run(held))
        close(got, want, "trained and new rows", rtol=1e-5, atol=1e-6)
        check(mine == sorted(k for k in rows if owner(k, size) == rank),
              "rank %d holds %s" % (rank, mine))

    def embedding_variable_counter_filter_matches_dict_model():
        """hb.get_embedding_variable with DeepRec's CounterFilter(2), read
        by tf.nn.embedding_lookup and trained by tf.compat.v1 SGD: an id
        seen fewer than 2 times in all ranks' lookups reads 0 and is not
        trained; admitted ids get their normal initial row and train as
        the dict model."""
        dim, batch, steps, lr, freq = 2, 5, 3, 0.3, 2
        mean, stddev, seed = 0.1, 0.3, 5
        rows, counts = {}, {}

        def lookup(all_ids):
            """Counts a lookup of every rank's ids; admits keys."""
            for ids in all_ids:
                for key in ids:
                    counts[int(key)] = counts.get(int(key), 0) + 1
            for key in {int(k) for ids in all_ids for k in ids}:
                if key not in rows and counts[key] >= freq:
                    rows[key] = normal_row(key, seed, mean, stddev, dim)

        for step in range(steps):
            all_ids = [batch_ids(step, r, (batch,)) for r in range(size)]
            lookup(all_ids)
            grads = {}
            for r, ids in enumerate(all_ids):
                t = targets(step, r, (batch, dim))
                for i, key in enumerate(ids):
                    if int(key) in rows:
                        grads[int(key)] = grads.get(int(key), 0) + \
                            t[i] / batch / size
            for key, g in grads.items():
                rows[key] = rows[key] - lr * g
        # Ids only rank 0 asks for, once: seen once in all, not admitted.
        queries = [np.array([POOL[0], POOL[4], POOL[-1], POOL[-2]]
                            if r == 0 else [POOL[0], POOL[4]] * 2, np.int64)
                   for r in range(size)]
        lookup(queries)
        query = queries[rank]
        want = np.stack([rows.get(int(k), np.zeros(dim)) for k in query])

        with tf.Graph().as_default():
            ids = V1.placeholder(tf.int64, [None])
            t = V1.placeholder(tf.float64, [None, dim])
            ev = hb.get_embedding_variable(
                "ev", embedding_dim=dim,
                initializer=V1.random_normal_initializer(mean, stddev,
                                                         seed=seed),
                ev_option=hb.EmbeddingVariableOption(
                    filter_option=hb.CounterFilter(filter_freq=freq)))
            out = tf.nn.embedding_lookup(ev, ids)
            loss = tf.reduce_sum(tf.cast(out, tf.float64) * t) / batch
            with hb.scope():
                train = V1.train.GradientDescentOptimizer(lr).minimize(loss)
            with hb.train.monitored_session() as sess:
                for step in range(steps):
                    sess.run(train, {ids: batch_ids(step, rank, (batch,)),
                                     t: targets(step, rank, (batch, dim))})
                got = sess.run(out, {ids: query})
        check(rank != 0 or any(k not in rows for k in map(int, query)),
              "the query has no filtered key")
        close(got, want, "filtered, trained and new rows", rtol=1e-5,
              atol=1e-6)

    def truncated_normal_default_rows():
        """An embedding column without an initializer (TF's default: a
        truncated normal of stddev 1/sqrt(dim)) gets the per-key
        truncated rows of docs/embedding.md: within 2 stddev, the same
        on every rank and at every world size."""
        dim = 4
        col = FC.embedding_column(
            hb.feature_column.raw_categorical_column("item"), dim)
        with tf.Graph().as_default():
            with hb.scope(emb_backend="PAIEV"):
                out, = hb.dense_features({"item": tf.constant(
                    POOL.reshape(-1, 1))}, [col])
            with hb.train.monitored_session() as sess:
                got = sess.run(out)
        want = np.stack([truncated_row(k, 1 / np.sqrt(dim), dim)
                         for k in POOL])
        close(got, want, "truncated normal rows", rtol=1e-5, atol=1e-6)
        check(np.all(np.abs(got) <= 2 / np.sqrt(dim) + 1e-6),
              "rows beyond 2 stddev: %s" % got)

    def paiev_enabled_per_column():
        """paiev_enabled={column: False} keeps a bounded column's fixed
        sharded table; raw_categorical_column stays dynamic whatever it
        says (HybridBackend's rule); hb.embedding.EmbeddingBackendPAIEV's
        enabled / build / lookup, called by hand."""
        fixed = FC.embedding_column(
            FC.categorical_column_with_identity("h", 50), 2)
        raw = FC.embedding_column(
            hb.feature_column.raw_categorical_column("r"), 2)
        with tf.Graph().as_default():
            with hb.scope(emb_backend="PAIEV",
                          paiev_enabled={"h": False, "r": False}):
                hb.dense_features({"h": tf.constant([[1]]),
                                   "r": tf.constant([[2 ** 50]])},
                                  [fixed, raw])
            tables = {v.name.split("/")[1]: v
                      for v in V1.global_variables()}
        check(embedding_variable.table_of(tables["r_embedding"]) is not
              None, "raw column not dynamic")
        info = hb.embedding.shard_info(tables["h_embedding"])
        check(embedding_variable.table_of(tables["h_embedding"]) is None
              and info is not None and info.num_rows == 50
              and not info.partition.hashed,
              "h: %s" % (info,))
        # HybridBackend's backend object, called by hand.
        backend = hb.embedding.EmbeddingBackendPAIEV()
        check(backend.NAME == "PAIEV" and backend.enabled(raw),
              "backend %r" % backend)
        with hb.scope(paiev_enabled={"h": False}):
            check(not backend.enabled(fixed), "h enabled")
        with tf.Graph().as_default():
            weight = backend.build(raw, "w", [sys.maxsize, 2],
                                   initializer=V1.ones_initializer())
            rows = backend.lookup(raw, weight, tf.constant([5, 2 ** 45]))
            with hb.train.monitored_session() as sess:
                close(sess.run(rows), np.ones((2, 2)), "backend rows")

    def categorical_column_with_embedding_strings():
        """DeepRec's categorical_column_with_embedding over strings (its
        default dtype), outside any PAIEV scope, with its own
        CounterFilter(2): a string's row is the formula's row of its
        fingerprint key (plain TF's to_hash_bucket_fast(s, 2**63 - 1));
        a string seen once in all ranks' lookups reads 0."""
        col = FC.embedding_column(
            hb.feature_column.categorical_column_with_embedding(
                "tag", ev_option=hb.EmbeddingVariableOption(
                    filter_option=hb.CounterFilter(filter_freq=2))),
            3, combiner="sum",
            initializer=V1.random_uniform_initializer(-1.0, 1.0, seed=11))
        tags = [["apple", "pear"], ["apple", ""], ["kiwi-%d" % rank, ""]]
        with tf.Graph().as_default():
            with hb.scope():
                out, = hb.dense_features({"tag": tf.constant(tags)}, [col])
            with hb.train.monitored_session() as sess:
                got = sess.run(out)
        keys = {s: int(tf.strings.to_hash_bucket_fast(s, 2 ** 63 - 1))
                for s in ("apple", "pear")}
        row = {s: uniform_row(k, 11, -1.0, 1.0, 3) for s, k in keys.items()}
        close(got, [row["apple"] + row["pear"], row["apple"], np.zeros(3)],
              "string rows")

    def saver_checkpoint_matches_dict_model():
        """hb.get_embedding_variable with DeepRec's GlobalStepEvict,
        trained by tf.compat.v1 Adagrad in hb.train.monitored_session(
        checkpoint_dir=...): the Saver's checkpoints hold, in DeepRec's
        layout, the keys that survived eviction in ascending order with
        the dict model's rows, counts, versions (the step of each key's
        last lookup) and Adagrad accumulators; a fresh graph restores
        them (each rank holds the keys it owns) and trains on as the
        model does. Every step's ids are one global batch split among
        the ranks (the gradient, averaged, does not depend on the world
        size), so the checkpoint is the same at 2 and 3 ranks."""
        dim, lr, ttl, seed = 2, 0.5, 1, 11
        shared = hbcore.broadcast_object(
            tempfile.mkdtemp(prefix="hb_paiev_saver_") if rank == 0
            else None, 0, name="hb_paiev_saver_dir")
        model = {"rows": {}, "acc": {}, "counts": {}, "versions": {},
                 "step": 0}

        def global_batch(step):
            rng = np.random.default_rng(4300 + step)
            pool = POOL[:6] if step < 2 else POOL[2:8] if step >= 4 else \
                POOL[:3]
            return (pool[rng.integers(0, len(pool), size=6)],
                    rng.uniform(-1.0, 1.0, size=(6, dim)))

        def model_step(step):
            ids, t = global_batch(step)
            model["step"] += 1
            grads = {}
            for key, target in zip(map(int, ids), t):
                model["counts"][key] = model["counts"].get(key, 0) + 1
                if key not in model["rows"]:
                    model["rows"][key] = uniform_row(key, seed, -0.5, 0.5,
                                                     dim)
                    model["acc"][key] = np.full(dim, 0.1)
                model["versions"][key] = model["step"]
                grads[key] = grads.get(key, 0) + target / len(ids)
            for key, g in grads.items():
                model["acc"][key] += g * g
                model["rows"][key] = model["rows"][key] - lr * g / np.sqrt(
                    model["acc"][key])

        def model_evict():
            dead = [k for k, v in model["versions"].items()
                    if model["step"] - v > ttl]
            for key in dead:
                for column in ("rows", "acc", "counts", "versions"):
                    del model[column][key]
            return dead

        def check_checkpoint(step):
            reader = V1.train.load_checkpoint(
                "%s/model.ckpt-%d" % (shared, step))
            keys = sorted(model["rows"])
            check(list(reader.get_tensor("ev-keys")) == keys,
                  "checkpoint keys %s, expected %s" % (
                      list(reader.get_tensor("ev-keys")), keys))
            check(list(reader.get_tensor("ev/Adagrad-keys")) == keys,
                  "slot keys differ from the store's")
            for name, column in (("-freqs", "counts"),
                                 ("-versions", "versions")):
                got = list(reader.get_tensor("ev" + name))
                want = [model[column][k] for k in keys]
                check(got == want, "ev%s %s, expected %s" % (name, got,
                                                              want))
            close(reader.get_tensor("ev-values"),
                  [model["rows"][k] for k in keys], "saved rows")
            close(reader.get_tensor("ev/Adagrad-values"),
                  [model["acc"][k] for k in keys], "saved accumulators")

        def train(first, last):
            with tf.Graph().as_default():
                gs = V1.train.get_or_create_global_step()
                ids = V1.placeholder(tf.int64, [None])
                t = V1.placeholder(tf.float64, [None, dim])
                ev = hb.get_embedding_variable(
                    "ev", embedding_dim=dim,
                    initializer=V1.random_uniform_initializer(
                        -0.5, 0.5, seed=seed),
                    ev_option=hb.EmbeddingVariableOption(
                        evict_option=hb.GlobalStepEvict(steps_to_live=ttl)))
                out = tf.nn.embedding_lookup(ev, ids)
                loss = tf.reduce_mean(tf.reduce_sum(
                    tf.cast(out, tf.float64) * t, axis=1))
                with hb.scope():
                    step_op = V1.train.AdagradOptimizer(lr).minimize(
                        loss, global_step=gs)
                held, _ = embedding_variable.table_of(ev).held()
                with hb.train.monitored_session(
                        checkpoint_dir=shared,
                        save_checkpoint_steps=1000) as sess:
                    mine = sorted(int(k) for k in sess.run(held))
                    check(sess.run(gs) == first, "restored global step %d, "
                          "expected %d" % (sess.run(gs), first))
                    for step in range(first, last):
                        batch, target = global_batch(step)
                        sess.run(step_op, {ids: batch[rank::size],
                                           t: target[rank::size]})
            return mine

        mine = train(0, 4)
        check(mine == [], "a fresh table holds %s" % mine)
        for step in range(4):
            model_step(step)
        check(model_evict() and model["rows"],
              "the data evicts no key, or every key")
        check_checkpoint(4)
        mine = train(4, 6)
        check(mine == sorted(k for k in model["rows"]
                             if owner(k, size) == rank),
              "rank %d restored %s" % (rank, mine))
        for step in range(4, 6):
            model_step(step)
        model_evict()
        check_checkpoint(6)

    def errors():
        """Bad input is an error naming the column or table, on every
        rank: float ids, an unsupported paiev_* option or argument, an
        unknown backend, a full table (when run), an EmbeddingVariable
        eagerly, a tf.compat.v1 Saver of embedding variables alone;
        under DEFAULT, raw_categorical_column still cannot be sharded."""
        raw = FC.embedding_column(
            hb.feature_column.raw_categorical_column("price"), 2)
        with tf.Graph().as_default():
            with hb.scope(emb_backend="PAIEV"):
                expect_raises(lambda: hb.dense_features(
                    {"price": tf.constant([[1.5]])}, [raw]),
                    ValueError, "price", "not integer")
            with hb.scope(emb_backend="PAIEV", paiev_regularizer={
                    "price": V1.keras.regularizers.l2(0.1)}):
                expect_raises(lambda: hb.dense_features(
                    {"price": tf.constant([[1]])}, [raw]),
                    NotImplementedError, "'price_embedding'",
                    "paiev_regularizer")
            expect_raises(lambda: hb.dense_features(
                {"price": tf.constant([[1]])}, [raw]),
                ValueError, "'price_embedding' cannot be sharded",
                "emb_backend='PAIEV'")
            ev = hb.get_embedding_variable("ev", 2)
            with V1.variable_scope(
                    "p", partitioner=V1.fixed_size_partitioner(2)):
                check(embedding_variable.table_of(
                    hb.get_embedding_variable("ev", 2)) is not None,
                    "a scope's partitioner split the embedding variable")
                check(V1.get_variable_scope().partitioner is not None,
                      "the scope lost its partitioner")
            expect_raises(lambda: tf.nn.embedding_lookup(
                ev, tf.constant([1.0])), TypeError, "'ev'", "float32")
            expect_raises(lambda: hb.get_embedding_variable(
                "ev2", 2, constraint=lambda x: x), NotImplementedError,
                "'ev2'", "constraint")
            expect_raises(lambda: hb.get_embedding_variable(
                "ev3", 2, key_dtype=tf.string), ValueError, "'ev3'",
                "key_dtype")
        expect_raises(lambda: hb.scope(emb_backend="HASH").__enter__(),
                      ValueError, "emb_backend", "PAIEV")
        expect_raises(lambda: hb.get_embedding_variable("eager", 2),
                      RuntimeError, "'eager'", "graph")
        # A Saver of dynamic tables alone has no checkpoint to merge them
        # into.
        with tf.Graph().as_default():
            ev = hb.get_embedding_variable("ev", 2)
            saver = V1.train.Saver([ev], allow_empty=True)
            with V1.Session() as sess:
                expect_raises(lambda: saver.save(sess, tempfile.mkdtemp()),
                              ValueError, "['ev']",
                              "only dynamic embedding tables")
        # A full table fails on every rank, naming it.
        with tf.Graph().as_default():
            with hb.scope(emb_backend="PAIEV", paiev_capacity=1):
                out, = hb.dense_features(
                    {"price": tf.constant(POOL.reshape(-1, 1))}, [raw])
            with hb.train.monitored_session() as sess:
                expect_raises(lambda: sess.run(out),
                              tf.errors.InvalidArgumentError,
                              "price_embedding/embedding_weights",
                              "capacity")

    table = {name: fn for name, fn in (
        ("hb_get_dense_tensor", hb_get_dense_tensor),
        ("hb_get_dense_tensor_with_varscope",
         hb_get_dense_tensor_with_varscope),
        ("hb_embedding_column_with_optimizer",
         hb_embedding_column_with_optimizer),
        ("hb_get_dense_tensor_disable_concat",
         hb_get_dense_tensor_disable_concat),
        ("hb_embedding_column_with_coalescing",
         hb_embedding_column_with_coalescing),
        ("hb_embedding_column_with_function",
         hb_embedding_column_with_function),
        ("hb_embedding_column_with_function_unique",
         hb_embedding_column_with_function_unique),
        ("hb_get_dense_tensor_with_segment_rank",
         hb_get_dense_tensor_with_segment_rank),
        ("hb_shared_embedding_column", hb_shared_embedding_column),
        ("dense_features_adagrad_matches_dict_model",
         dense_features_adagrad_matches_dict_model),
        ("embedding_variable_counter_filter_matches_dict_model",
         embedding_variable_counter_filter_matches_dict_model),
        ("truncated_normal_default_rows", truncated_normal_default_rows),
        ("paiev_enabled_per_column", paiev_enabled_per_column),
        ("categorical_column_with_embedding_strings",
         categorical_column_with_embedding_strings),
        ("saver_checkpoint_matches_dict_model",
         saver_checkpoint_matches_dict_model),
        ("errors", errors))}
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
