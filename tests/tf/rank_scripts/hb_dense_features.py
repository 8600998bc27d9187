"""hb.dense_features at any rank count (run by
tests/tf/test_hb_dense_features.py under hbrun).

Every expected value comes from plain TensorFlow in the same process:
``tf.compat.v1.feature_column.input_layer`` over the same columns on
unsharded tables with the same initial values, fed this rank's batch
(lookups) or the whole batch of every step (every rank's batch
concatenated in rank order: training). The tables have 23, 11, 17 and 13
rows: uneven blocks at 2 and at 3 ranks.
"""
import os
import tempfile

import numpy as np

from train_common import (check, Checker, close, expect_raises, rank_values,
                          report, run_table, tf)

import hbcore_tf as hb  # noqa: E402
from hbcore_tf.embedding import shard_info  # noqa: E402

V1 = tf.compat.v1
FC = tf.feature_column

CASES = ["lookups_match_input_layer", "shared_embedding_columns",
         "adagrad_training_matches_single_process",
         "graph_is_rank_independent", "errors",
         "keras_layer_matches_tf_keras_dense_features",
         "keras_layer_adam_training_matches_single_process",
         "function_initializer_rows_are_round_robin", "segment_rank",
         "columns_that_cannot_be_sharded", "optimizer_session_run_hook",
         "eager_hb_function_builds_in_default_graph"]
BATCH, STEPS, LR = 4, 3, 0.1
ROWS = {"a": 23, "b": 11, "c": 17, "xy": 13}
DIMS = {"a": 4, "b": 3, "c": 2, "xy": 3}


def table0(key):
    return 0.5 * rank_values(70 + len(key) * 7 + ord(key[0]), 0,
                             (ROWS[key], DIMS[key]))


def columns():
    """The columns, in a list order that is not their name order:
    [b (hash, mean), n (numeric), a (identity, sum), c (weighted, sqrtn)]."""
    init = lambda key: V1.constant_initializer(table0(key))  # noqa: E731
    a = FC.embedding_column(
        FC.categorical_column_with_identity("a", ROWS["a"]), DIMS["a"],
        combiner="sum", initializer=init("a"))
    b = FC.embedding_column(
        FC.categorical_column_with_hash_bucket("b", ROWS["b"]), DIMS["b"],
        combiner="mean", initializer=init("b"))
    c = FC.embedding_column(
        FC.weighted_categorical_column(
            FC.categorical_column_with_identity("c", ROWS["c"]), "cw"),
        DIMS["c"], combiner="sqrtn", initializer=init("c"))
    n = FC.numeric_column("n", shape=(2,))
    return [b, n, a, c]


def shared_columns():
    """v1 shared embedding columns of x and y (one 13-row table)."""
    return V1.feature_column.shared_embedding_columns(
        [FC.categorical_column_with_identity("x", ROWS["xy"]),
         FC.categorical_column_with_identity("y", ROWS["xy"])],
        DIMS["xy"], combiner="mean",
        initializer=V1.constant_initializer(table0("xy")))


def raw_batch(step, rank):
    """This rank's batch as Python lists: ragged ids per example (an empty
    example, duplicates, id 22 - rank on this rank only), strings, weights
    and numbers."""
    rng = np.random.default_rng([900 + step, rank])
    a = [list(rng.integers(0, ROWS["a"] - 3, size=k)) for k in (3, 1, 0, 2)]
    a[0][1] = a[0][0]
    a[3][0] = ROWS["a"] - 1 - rank
    c = [list(rng.integers(0, ROWS["c"], size=k)) for k in (2, 2, 1, 1)]
    cw = [list(rng.uniform(0.5, 2.0, size=len(ids))) for ids in c]
    x = [[int(v)] for v in rng.integers(0, ROWS["xy"], size=BATCH)]
    y = [list(rng.integers(0, ROWS["xy"], size=2)) for _ in range(BATCH)]
    return {"a": a, "b": [["u%d" % rng.integers(0, 40), "v%d" % rank]
                          for _ in range(BATCH)],
            "c": c, "cw": cw, "x": x, "y": y,
            "n": rank_values(950 + step, rank, (BATCH, 2)),
            "label": rank_values(960 + step, rank, (BATCH, 1))}


def whole_batch(step, size):
    parts = [raw_batch(step, r) for r in range(size)]
    return {k: (np.concatenate([p[k] for p in parts])
                if isinstance(parts[0][k], np.ndarray)
                else sum((p[k] for p in parts), []))
            for k in parts[0]}


def ragged_to_sparse(rows, dtype):
    indices = [[i, j] for i, row in enumerate(rows) for j in range(len(row))]
    values = [v for row in rows for v in row]
    width = max([len(row) for row in rows] + [1])
    return tf.compat.v1.SparseTensorValue(
        np.array(indices, np.int64).reshape(-1, 2),
        np.array(values, dtype), np.array([len(rows), width], np.int64))


class Inputs:
    """Placeholders for the features (sparse ones for ragged ids) and the
    feed of a raw batch."""

    SPARSE = {"a": np.int64, "c": np.int64, "cw": np.float32,
              "x": np.int64, "y": np.int64}

    def __init__(self):
        self.ph = {k: V1.sparse_placeholder(tf.as_dtype(d), name=k)
                   for k, d in self.SPARSE.items()}
        self.ph["b"] = V1.placeholder(tf.string, (None, 2), name="b")
        self.ph["n"] = V1.placeholder(tf.float32, (None, 2), name="n")
        self.label = V1.placeholder(tf.float32, (None, 1), name="label")

    def features(self):
        return dict(self.ph)

    def feed(self, raw):
        feed = {self.ph[k]: ragged_to_sparse(raw[k], d)
                for k, d in self.SPARSE.items()}
        feed[self.ph["b"]] = np.array(raw["b"])
        feed[self.ph["n"]] = raw["n"]
        feed[self.label] = raw["label"]
        return feed


def plain_outputs(cols, raw):
    """input_layer's per-column outputs (unsharded tables), in the order
    of ``cols``."""
    with tf.Graph().as_default():
        inputs = Inputs()
        by_column = {}
        V1.feature_column.input_layer(inputs.features(), cols,
                                      cols_to_output_tensors=by_column)
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            return sess.run([by_column[c] for c in cols], inputs.feed(raw))


def model(features_fn, inputs, width):
    """logits of a linear layer over the concatenated column outputs."""
    x = tf.concat(features_fn(inputs.features()), 1)
    w = V1.get_variable("w", initializer=tf.constant(
        rank_values(980, 0, (width, 1))))
    b = V1.get_variable("bias", initializer=tf.constant([0.1]))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - inputs.label))
    return loss, w


def tf_keras():
    import tf_keras as module
    return module


def ids_table(num_rows, dim):
    """A table whose row i is [i, 10 i, ...]: every row is recognisable."""
    return (np.arange(num_rows, dtype=np.float32)[:, None]
            * np.float32(10.0) ** np.arange(dim, dtype=np.float32)[None, :])


def sparse_ids(rows):
    return ragged_to_sparse(rows, np.int64)


def main():
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)

    def check_table(name, key):
        """The table is sharded over every rank under its own name."""
        table = [v for v in V1.global_variables()
                 if v.name == "dense_features/%s/embedding_weights:0" % name]
        check(len(table) == 1, "no table %s in %s" % (
            name, [v.name for v in V1.global_variables()]))
        info = shard_info(table[0])
        check(info is not None and info.num_rows == ROWS[key]
              and info.partition.num_shards == size
              and tuple(table[0].shape) == (info.rows, DIMS[key]),
              "%s: shape %s, %s" % (name, table[0].shape, info))
        return table[0], info

    def lookups_match_input_layer():
        """Each output is input_layer's for its column (unsharded tables,
        this rank's batch), in the list's order; the tables are sharded."""
        cols = columns()
        raw = raw_batch(0, rank)
        want = plain_outputs(cols, raw)
        with tf.Graph().as_default():
            inputs = Inputs()
            with hb.scope():
                outs = hb.dense_features(inputs.features(), cols)
            check(isinstance(outs, list) and len(outs) == len(cols),
                  "returned %r" % (outs,))
            for key in "abc":
                check_table("%s_embedding" % ("c_weighted_by_cw"
                                              if key == "c" else key), key)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                got = sess.run(outs, inputs.feed(raw))
        for col, g, w in zip(cols, got, want):
            close(g, w, col.name)
        check(not np.any(got[2][2]), "empty example: %s" % got[2][2])

    def shared_embedding_columns():
        """Two columns sharing one sharded table: one table, two lookups,
        each equal to input_layer's."""
        with tf.Graph().as_default():  # TF makes them in graph mode only
            cols = shared_columns()
        raw = raw_batch(1, rank)
        want = plain_outputs(cols, raw)
        with tf.Graph().as_default():
            inputs = Inputs()
            with hb.scope():
                outs = hb.dense_features(inputs.features(), cols)
            check_table("x_y_shared_embedding", "xy")
            check(len(V1.global_variables()) == 1,
                  "variables %s" % V1.global_variables())
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                got = sess.run(outs, inputs.feed(raw))
        for col, g, w in zip(cols, got, want):
            close(g, w, col.name)

    def training_matches_single_process(features_fn, make_opt, slot):
        """A tf.compat.v1 optimizer built in hb.scope trains the sharded
        tables (and the dense weights) of ``features_fn`` (per-column
        outputs in list order) as plain TF trains full tables on the
        whole batch of every step; the slot ``slot`` of each table is a
        shard of it."""
        cols = columns()
        width = sum(DIMS[k] for k in "abc") + 2
        # The reference: input_layer's per-column outputs, list order.
        with tf.Graph().as_default():
            inputs = Inputs()

            def plain(f):
                by_column = {}
                V1.feature_column.input_layer(
                    f, cols, cols_to_output_tensors=by_column)
                return [by_column[c] for c in cols]
            loss, w = model(plain, inputs, width)
            train = make_opt().minimize(loss)
            tables = {k: [v for v in V1.global_variables()
                          if v.name.startswith("input_layer/%s_" % k)
                          and v.name.endswith("weights:0")][0]
                      for k in "abc"}
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(STEPS):
                    sess.run(train, inputs.feed(whole_batch(k, size)))
                want_tables, want_w = sess.run([tables, w])
        with tf.Graph().as_default():
            inputs = Inputs()
            with hb.scope():
                loss, w = model(lambda f: features_fn(f, cols), inputs,
                                width)
                opt = make_opt()
                train = opt.minimize(loss)
            shards = {k: check_table("%s_embedding" % (
                "c_weighted_by_cw" if k == "c" else k), k) for k in "abc"}
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                for k in range(STEPS):
                    sess.run(train, inputs.feed(raw_batch(k, rank)))
                got_w = sess.run(w)
                for key, (table, info) in shards.items():
                    state = opt.get_slot(table, slot)
                    check(tuple(state.shape) == tuple(table.shape),
                          "%s slot %s" % (key, state.shape))
                    close(sess.run(table), want_tables[key][
                        info.offset:info.offset + info.rows],
                        "table %s rows" % key, rtol=1e-4, atol=1e-5)
        close(got_w, want_w, "dense weight", rtol=1e-4, atol=1e-5)

    def adagrad_training_matches_single_process():
        """hb.dense_features trained by tf.compat.v1 Adagrad."""
        training_matches_single_process(
            hb.dense_features, lambda: V1.train.AdagradOptimizer(LR),
            "accumulator")

    def keras_layer_adam_training_matches_single_process():
        """hb.keras.layers.DenseFeatures trained by tf.compat.v1 Adam
        (HybridBackend's tests' optimizer)."""
        def through_layer(features, cols):
            by_column = {}
            hb.keras.layers.DenseFeatures(cols)(
                features, cols_to_output_tensors=by_column)
            return [by_column[c] for c in cols]
        training_matches_single_process(
            through_layer, lambda: V1.train.AdamOptimizer(LR), "m")

    def graph_is_rank_independent():
        """Every rank builds the same ops (types and names) whatever the
        list order: the columns are built in name order."""
        def ops_of(cols):
            with tf.Graph().as_default() as graph:
                inputs = Inputs()
                hb.dense_features(inputs.features(), cols)
                return sorted((op.name, op.type)
                              for op in graph.get_operations())
        cols = columns()
        mine = ops_of(cols)
        check(mine == ops_of(list(reversed(cols))),
              "the graph depends on the list order")
        everyone = hb.allgather_object(mine)
        check(all(theirs == mine for theirs in everyone),
              "ranks built different graphs")

    def errors():
        """Bad arguments are errors on every rank before any collective
        (ValueError as input_layer's and HybridBackend's), and eager or
        tf.function use is a RuntimeError."""
        a, n = columns()[2], columns()[1]
        with tf.Graph().as_default():
            ids = tf.sparse.SparseTensor([[0, 0]], tf.constant([1], tf.int64),
                                         [1, 1])
            expect_raises(lambda: hb.dense_features([ids], [a]), ValueError,
                          "mapping from feature key")
            expect_raises(lambda: hb.dense_features({"a": ids}, []),
                          ValueError, "must not be empty")
            expect_raises(lambda: hb.dense_features({"a": ids}, [a, a]),
                          ValueError, "Duplicate feature column name")
            expect_raises(lambda: hb.dense_features(
                {"a": ids}, [a.categorical_column]), ValueError,
                "must be a _DenseColumn")
        expect_raises(lambda: hb.dense_features(
            {"n": tf.zeros([1, 2])}, [n]), RuntimeError, "not eagerly")

        @tf.function
        def traced():
            return hb.dense_features({"n": tf.zeros([1, 2])}, [n])
        expect_raises(traced, RuntimeError, "tf.function")


    def eager_hb_function_builds_in_default_graph():
        """A HybridBackend v1 script on TensorFlow 2 with only ``import
        tensorflow.compat.v1``: an @hb.function whose body reaches feature
        columns, called eagerly, is built in the default graph (as in
        TensorFlow 1), and hb.train.monitored_session runs it there; its
        outputs are input_layer's. Outside hb.function eager use is still
        an error, and inside a tf.function too."""
        cols = columns()
        raw = raw_batch(3, rank)
        want = plain_outputs(cols, raw)

        @hb.function(emb_unique=True)
        def build():
            features = {k: tf.SparseTensor(*ragged_to_sparse(raw[k], d))
                        for k, d in Inputs.SPARSE.items()}
            features["b"] = tf.constant(raw["b"])
            features["n"] = tf.constant(raw["n"], tf.float32)
            return hb.keras.layers.DenseFeatures(
                cols, enable_concat=False)(features)

        check(tf.executing_eagerly(), "the case must start eagerly")
        V1.reset_default_graph()
        try:
            outs = build()
            check(all(o.graph is V1.get_default_graph() for o in outs),
                  "outputs not in the default graph: %s" % outs)
            check(tf.executing_eagerly(), "eager mode left switched off")
            with hb.train.monitored_session() as sess:
                got = sess.run(outs)
        finally:
            V1.reset_default_graph()
        # DenseFeatures' list is in name order: b, a, c_weighted_by_cw, n.
        by_name = dict(zip(sorted(c.name for c in cols), got))
        for col, w in zip(cols, want):
            close(by_name[col.name], w, col.name)
        expect_raises(lambda: hb.keras.layers.DenseFeatures(cols[1:2])(
            {"n": tf.zeros([1, 2])}), RuntimeError, "not eagerly")

        @tf.function
        @hb.function
        def traced():
            return hb.dense_features({"n": tf.zeros([1, 2])}, [cols[1]])
        expect_raises(traced, RuntimeError, "tf.function")

    def keras_layer_matches_tf_keras_dense_features():
        """hb.keras.layers.DenseFeatures computes tf_keras.layers.
        DenseFeatures' concatenation (name order) on one process with
        unsharded tables; enable_concat=False gives the same tensors as a
        list; a second call reuses the tables; the tables are the layer's
        trainable weights, sharded; bad keywords are errors."""
        cols = columns()
        raw = raw_batch(2, rank)
        with tf.Graph().as_default():
            inputs = Inputs()
            plain = tf_keras().layers.DenseFeatures(cols)(inputs.features())
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                want = sess.run(plain, inputs.feed(raw))
        with tf.Graph().as_default():
            inputs = Inputs()
            with hb.scope():
                layer = hb.keras.layers.DenseFeatures(cols)
                out = layer(inputs.features())
                again = layer(inputs.features())
                listed = hb.keras.layers.DenseFeatures(
                    cols, enable_concat=False, name="listed")(
                        inputs.features())
            tables = [v for v in layer.trainable_weights if
                      "embedding_weights" in v.name]
            check(len(tables) == 3 and all(
                shard_info(t) is not None
                and shard_info(t).partition.num_shards == size
                for t in tables), "layer tables %s" % tables)
            check(len(V1.global_variables()) == 6,
                  "variables %s" % V1.global_variables())
            check(layer.num_groups == 1 and layer.enable_concat,
                  "defaults %s %s" % (layer.num_groups, layer.enable_concat))
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                got, got2, got_list = sess.run([out, again, listed],
                                               inputs.feed(raw))
        close(got, want, "concatenated output")
        close(got2, want, "second call")
        check(isinstance(got_list, (list, tuple)) and len(got_list) == 4,
              "enable_concat=False gave %r" % type(got_list))
        close(np.concatenate(got_list, 1), want, "listed outputs")
        layer_class = hb.keras.layers.DenseFeatures
        expect_raises(lambda: layer_class(cols, num_groups=0), ValueError,
                      "emb_num_groups must be >= 1")
        expect_raises(lambda: layer_class(cols, enable_concat="no"),
                      TypeError, "emb_enable_concat")
        check(layer_class(cols, num_groups=None).num_groups is None,
              "num_groups=None")
        with hb.scope(emb_num_groups=3, emb_enable_concat=False):
            scoped = layer_class(cols)
        check(scoped.num_groups == 3 and not scoped.enable_concat,
              "options as defaults")

        with tf.Graph().as_default():
            expect_raises(lambda: layer_class(cols)([1]), ValueError,
                          "expects a dict")
        expect_raises(lambda: layer_class([cols[1]])(
            {"n": tf.zeros([1, 2])}), RuntimeError, "not eagerly")

    def function_initializer_rows_are_round_robin():
        """An initializer that is a function is called as HybridBackend
        calls it: for this rank's rows (ids rank, rank + size, ...) with
        partition_info None, or once per partition of them under a
        partitioner; the table then holds ids in blocks, so lookups, the
        stored rows and the checkpoint (the whole table in id order) are
        those of the whole table."""
        num_rows, dim = 11, 2
        whole = ids_table(num_rows, dim)
        mine = whole[rank::size]
        calls = []

        def init(shape, dtype=None, partition_info=None):
            if list(shape) == [num_rows, dim]:
                return whole  # the serving graph's plain table
            offset = 0 if partition_info is None else \
                partition_info.var_offset[0]
            calls.append((list(shape), partition_info is None, offset))
            return mine[offset:offset + shape[0]]

        shared = hb.broadcast_object(
            tempfile.mkdtemp(prefix="hb_dense_features_") if rank == 0
            else None, 0)
        ids = [[10, 0], [rank], [], [num_rows - 1 - rank, 3, 3]]
        means = np.stack([whole[r].mean(0) if r else np.zeros(dim)
                          for r in ids])
        for partitioner in (None, V1.fixed_size_partitioner(2)):
            del calls[:]
            with tf.Graph().as_default():
                ph = V1.sparse_placeholder(tf.int64)
                col = FC.embedding_column(
                    FC.categorical_column_with_identity("r", num_rows), dim,
                    combiner="mean", initializer=init)
                with hb.scope(), V1.variable_scope(
                        "vs", partitioner=partitioner):
                    out = hb.keras.layers.DenseFeatures([col])({"r": ph})
                table = [v for v in V1.global_variables()
                         if "embedding_weights" in v.name]
                check(len(table) == 1, "tables %s" % table)
                info = shard_info(table[0])
                saver = V1.train.Saver()
                with V1.Session() as sess:
                    sess.run(V1.global_variables_initializer())
                    got, rows = sess.run(
                        [out, table[0]], {ph: sparse_ids(ids)})
                    saved = saver.save(sess, os.path.join(shared, "ckpt"))
            # The checkpoint holds the whole table in id order.
            close(tf.train.load_variable(saved, info.name), whole,
                  "checkpointed table, partitioner %s" % partitioner)
            local = len(mine)
            if partitioner is None:
                want_calls = [([local, dim], True, 0)]
            else:
                first = (local + 1) // 2
                want_calls = [([first, dim], False, 0),
                              ([local - first, dim], False, first)]
            check(calls == want_calls, "calls %s, expected %s" % (
                calls, want_calls))
            close(got, means, "lookups, partitioner %s" % partitioner)
            close(rows, whole[info.offset:info.offset + info.rows],
                  "stored block")
        # Exported, it is served by plain TF with the whole table.
        padded = np.array([r + [-1] * (3 - len(r)) for r in ids], np.int64)

        def serving():
            dense = V1.placeholder(tf.int64, [None, 3], name="ids")
            with V1.variable_scope("vs"):
                out = hb.keras.layers.DenseFeatures([col])({"r": dense})
            return {"serving_default": V1.saved_model.predict_signature_def(
                {"ids": dense}, {"emb": out})}
        exported = hb.saved_model.export_all(
            os.path.join(shared, "export"), saved, serving)
        with tf.Graph().as_default(), V1.Session() as sess:
            meta = V1.saved_model.loader.load(sess, ["serve"], exported)
            sig = meta.signature_def["serving_default"]
            served = sess.run(sig.outputs["emb"].name,
                              {sig.inputs["ids"].name: padded})
            shapes = [tuple(v.shape) for v in V1.global_variables()]
        check(shapes == [(num_rows, dim)], "served variables %s" % shapes)
        close(served, means, "served lookups")

    def segment_rank():
        """emb_segment_rank={'s': 1}: one output row per (i, j) of rank-3
        ids, as input_layer computes on the ids reshaped to [4 * 2, 3];
        a dict entry under the embedding column's own name wins over one
        under its feature key."""
        num_rows, dim = 7, 2
        table = rank_values(77, 0, (num_rows, dim))
        rng = np.random.default_rng([31, rank])
        cells = [(i, j, k) for i in range(4) for j in range(2)
                 for k in range(3) if rng.uniform() < 0.4]
        values = rng.integers(0, num_rows, size=len(cells))
        rank3 = V1.SparseTensorValue(
            np.array(cells, np.int64).reshape(-1, 3), values.astype(np.int64),
            np.array([4, 2, 3], np.int64))
        flat = V1.SparseTensorValue(
            np.array([[i * 2 + j, k] for i, j, k in cells],
                     np.int64).reshape(-1, 2),
            values.astype(np.int64), np.array([8, 3], np.int64))

        def col():
            return FC.embedding_column(
                FC.categorical_column_with_identity("s", num_rows), dim,
                combiner="sum", initializer=V1.constant_initializer(table))
        with tf.Graph().as_default():
            ph = V1.sparse_placeholder(tf.int64)
            plain = V1.feature_column.input_layer({"s": ph}, [col()])
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                want = sess.run(plain, {ph: flat})
        with tf.Graph().as_default():
            ph = V1.sparse_placeholder(tf.int64, shape=[None, None, None])
            with hb.scope(emb_segment_rank={"s": 1}):
                out = hb.keras.layers.DenseFeatures([col()])({"s": ph})
            # The embedding column's own name comes first (HybridBackend).
            with hb.scope(emb_segment_rank={"s_embedding": 1, "s": 2}):
                outs = hb.dense_features({"s": ph}, [col()])
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                got, got_fn = sess.run([out, outs[0]], {ph: rank3})
        check(got.shape == (8, dim), "shape %s" % (got.shape,))
        close(got, want, "segment rank 1")
        close(got_fn, want, "segment rank 1, hb.dense_features")
        with tf.Graph().as_default():
            ph = V1.sparse_placeholder(tf.int64, shape=[None, None])
            with hb.scope(emb_segment_rank={"s": 2}):
                expect_raises(lambda: hb.dense_features({"s": ph}, [col()]),
                              ValueError, "emb_segment_rank=2 for column 's'")

    def columns_that_cannot_be_sharded():
        """A column whose table hbcore cannot shard is a ValueError naming
        the column and what was wrong (a shared_embeddings column, a
        sequence column, a column of unchecked ids or with at least
        emb_num_buckets_max buckets); hb.feature_column has
        HybridBackend's names."""
        ids = FC.categorical_column_with_identity("q", 5)
        with tf.Graph().as_default():
            shared = FC.shared_embeddings(
                [ids, FC.categorical_column_with_identity("p", 5)], 2)
            feats = {"q": tf.sparse.SparseTensor(
                [[0, 0]], tf.constant([1], tf.int64), [1, 1])}
            feats["p"] = feats["q"]
            exc = expect_raises(lambda: hb.dense_features(feats, shared),
                                ValueError, "cannot be sharded")
            check(shared[0].name in str(exc) or shared[1].name in str(exc),
                  "message names no column: %s" % exc)
            seq = FC.embedding_column(
                FC.sequence_categorical_column_with_identity("q", 5), 2)
            expect_raises(lambda: hb.keras.layers.DenseFeatures([seq])(feats),
                          ValueError, "'q_embedding' cannot be sharded")
            raw = hb.feature_column.embedding_column(
                hb.feature_column.raw_categorical_column("q"), 2)
            expect_raises(lambda: hb.feature_column.DenseFeatures([raw])(
                feats), ValueError, "num_buckets of categorical_column q "
                "must be set explicitly")
            capped = FC.embedding_column(ids, 2)
            with hb.scope(emb_num_buckets_max={"q": 5}):
                expect_raises(lambda: hb.dense_features(feats, [capped]),
                              ValueError, "'q_embedding' cannot be sharded")
            with hb.scope(emb_num_buckets_max={"q": 6}):
                hb.dense_features(feats, [capped])  # below the cap
        check(hb.feature_column.DenseFeatures is hb.keras.layers.DenseFeatures
              and hb.feature_column.embedding_column is FC.embedding_column,
              "hb.feature_column's names")

    def optimizer_session_run_hook():
        """A tf.compat.v1 optimizer built in hb.scope has HybridBackend's
        make_session_run_hook(): in a plain MonitoredSession it gives
        every rank rank 0's replicated variables and leaves each rank its
        own rows of a sharded table."""
        with tf.Graph().as_default():
            dense = V1.get_variable("dense", initializer=tf.constant(
                rank_values(61, rank, (3,))))
            with hb.scope():
                with hb.embedding_scope():
                    table = V1.get_variable(
                        "table", initializer=V1.constant_initializer(
                            ids_table(5, 2)), shape=[5, 2])
                opt = V1.train.GradientDescentOptimizer(0.1)
            hook = opt.make_session_run_hook()
            check(isinstance(hook, V1.train.SessionRunHook), "hook %r" % hook)
            info = shard_info(table)
            with V1.train.MonitoredSession(hooks=[hook]) as sess:
                got_dense, got_rows = sess.run([dense, table])
        close(got_dense, rank_values(61, 0, (3,)), "dense after the hook")
        close(got_rows, ids_table(5, 2)[info.offset:info.offset + info.rows],
              "sharded rows after the hook")

    table = {
        "lookups_match_input_layer": lookups_match_input_layer,
        "shared_embedding_columns": shared_embedding_columns,
        "adagrad_training_matches_single_process":
            adagrad_training_matches_single_process,
        "graph_is_rank_independent": graph_is_rank_independent,
        "errors": errors,
        "keras_layer_matches_tf_keras_dense_features":
            keras_layer_matches_tf_keras_dense_features,
        "keras_layer_adam_training_matches_single_process":
            keras_layer_adam_training_matches_single_process,
        "function_initializer_rows_are_round_robin":
            function_initializer_rows_are_round_robin,
        "segment_rank": segment_rank,
        "columns_that_cannot_be_sharded": columns_that_cannot_be_sharded,
        "optimizer_session_run_hook": optimizer_session_run_hook,
        "eager_hb_function_builds_in_default_graph":
            eager_hb_function_builds_in_default_graph,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
