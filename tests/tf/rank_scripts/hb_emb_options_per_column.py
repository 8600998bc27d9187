"""Per-column embedding options (HybridBackend's ``{column_name: value}``
dicts) at any rank count (run by tests/tf/test_hb_emb_options_per_column.py
under hbrun).

Expected values come from plain TensorFlow in the same process
(``tf.compat.v1.feature_column.input_layer`` on unsharded tables with the
same initial values; the whole batch of every step for training); which
option a lookup used is read from the graph (the routing kernel's
``unique`` attribute, the dtype the rows travel in).
"""
import numpy as np

from train_common import (check, Checker, close, expect_raises, rank_values,
                          report, run_table, tf)

import hbcore_tf as hb  # noqa: E402
from hbcore_tf.embedding import shard_info  # noqa: E402
from hbcore_tf._base.options import Options, PerColumn, options  # noqa: E402

V1 = tf.compat.v1
FC = tf.feature_column

CASES = ["dict_values_validated_and_stored", "lookup_rule",
         "errors_name_option_and_column",
         "dense_features_reads_each_columns_value",
         "sgd_training_with_per_column_options"]
ROWS = {"a": 23, "b": 11}
DIM, BATCH, STEPS, LR = 3, 4, 2, 0.2
PER_COLUMN = ["emb_unique", "emb_wire_dtype", "emb_device",
              "emb_input_device", "emb_dtype", "emb_input_dtype", "emb_pad",
              "emb_num_buckets_max", "emb_segment_rank"]


def table0(key):
    return 0.5 * rank_values(40 + ord(key), 0, (ROWS[key], DIM))


def columns():
    return [FC.embedding_column(
        FC.categorical_column_with_identity(key, ROWS[key]), DIM,
        combiner="sum", initializer=V1.constant_initializer(table0(key)))
        for key in ("b", "a")]


def batch(step, rank):
    """Ids [BATCH, 3] per column, with duplicates in every example (so
    deduplication matters) and id rows - 1 - rank on this rank only."""
    rng = np.random.default_rng([300 + step, rank])
    out = {}
    for key, rows in ROWS.items():
        ids = rng.integers(0, rows - 3, size=(BATCH, 3)).astype(np.int64)
        ids[:, 1] = ids[:, 0]
        ids[0, 2] = rows - 1 - rank
        out[key] = ids
    out["label"] = rank_values(310 + step, rank, (BATCH, 1))
    return out


def whole_batch(step, size):
    parts = [batch(step, r) for r in range(size)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def graph_of(build):
    """(outputs, placeholders, graph) of ``build(features)`` in a new
    graph with dense int64 id placeholders [None, 3]."""
    graph = tf.Graph()
    with graph.as_default():
        ph = {k: V1.placeholder(tf.int64, (None, 3), name=k) for k in ROWS}
        ph["label"] = V1.placeholder(tf.float32, (None, 1), name="label")
        out = build(ph)
    return out, ph, graph


def lookup_ops(graph, where):
    """{"unique": [...], "wire": [...]} of the sharded lookups whose op
    names start with ``where``: the routing kernels' ``unique`` attribute and
    the dtypes of the floating tensors the alltoalls send."""
    ops = [op for op in graph.get_operations()
           if op.name.startswith(where)]
    return {"unique": [op.get_attr("unique") for op in ops
                       if op.type == "HbcoreShardRoute"],
            "wire": sorted({op.inputs[0].dtype.name for op in ops
                            if op.type == "HbcoreAlltoall"
                            and op.inputs[0].dtype.is_floating})}


def main():
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)

    def dict_values_validated_and_stored():
        """Every per-column option takes a dict (scope, update, attribute)
        and stores it as a read-only PerColumn of normalized values; the
        option's plain value still works."""
        given = {"emb_unique": {"a": False}, "emb_wire_dtype": {
            "a": tf.bfloat16}, "emb_device": {"a": "/cpu:0"},
            "emb_input_device": {"a": ""}, "emb_dtype": {"a": tf.float16},
            "emb_input_dtype": {"a": "int32"}, "emb_pad": {"a": True},
            "emb_num_buckets_max": {"a": np.int64(7)},
            "emb_segment_rank": {"a": 1}}
        want = {"emb_unique": False, "emb_wire_dtype": "bfloat16",
                "emb_device": "/cpu:0", "emb_input_device": "",
                "emb_dtype": "float16", "emb_input_dtype": "int32",
                "emb_pad": True, "emb_num_buckets_max": 7,
                "emb_segment_rank": 1}
        check(sorted(given) == sorted(PER_COLUMN), "test covers all")
        with hb.scope(**given):
            for name in PER_COLUMN:
                value = getattr(options, name)
                check(isinstance(value, PerColumn) and dict(value) ==
                      {"a": want[name]}, "%s stored %r" % (name, value))
                check(type(value["a"]) is type(want[name]),
                      "%s['a'] is %s" % (name, type(value["a"])))
            expect_raises(lambda: options.emb_unique.__setitem__("a", True),
                          AttributeError)
        check(options.emb_unique is True, "scope unwound: %r" %
              options.emb_unique)
        mine = Options(environ={})
        mine.update(emb_pad={"a": True})
        mine.emb_segment_rank = {"b": 2}
        check(dict(mine.emb_pad) == {"a": True} and
              dict(mine.emb_segment_rank) == {"b": 2},
              "update / attribute: %r" % mine)
        mine.emb_segment_rank = 3
        check(mine.emb_segment_rank == 3, "plain value after a dict")

    def lookup_rule():
        """HybridBackend's rule: a column's own entry, else the option's
        default (HB_<NAME> when set, else the built-in one), never a value
        set outside the dict; a plain value applies to every column; no
        column (a lookup outside dense_features) gets the default."""
        mine = Options(environ={"HB_EMB_UNIQUE": "0",
                                "HB_EMB_WIRE_DTYPE": "float16"})
        check(mine.default("emb_unique") is False
              and mine.default("emb_segment_rank") == 0,
              "defaults %r" % mine.default("emb_unique"))
        mine.emb_wire_dtype = "bfloat16"  # process-wide, not a default
        with mine.scope(emb_unique={"a": True}, emb_wire_dtype={"a":
                                                                "float32"},
                        emb_segment_rank=2):
            got = [mine.for_column("emb_unique", "a"),
                   mine.for_column("emb_unique", "b"),
                   mine.for_column("emb_unique", None),
                   mine.for_column("emb_wire_dtype", "a"),
                   mine.for_column("emb_wire_dtype", "b"),
                   mine.for_column("emb_segment_rank", "b")]
            check(got == [True, False, False, "float32", "float16", 2],
                  "for_column %r" % got)
        check(mine.for_column("emb_wire_dtype", "a") == "bfloat16",
              "a plain value is every column's")
        plain = Options(environ={})
        with plain.scope(emb_unique=False):
            with plain.scope(emb_unique={"a": False}):
                check(plain.for_column("emb_unique", "b") is True,
                      "an enclosing scope's value filled in for b")
        expect_raises(lambda: plain.for_column("emb_nope", "a"),
                      AttributeError, "unknown hbcore_tf option")

    def errors_name_option_and_column():
        """Bad dicts are errors naming the option (and the column)."""
        def bad(kwargs, kind, fragment):
            def enter():
                with hb.scope(**kwargs):
                    pass
            expect_raises(enter, kind, fragment)
        bad({"emb_unique": {"a": "yes"}}, TypeError,
            "emb_unique['a'] expects a value of type bool")
        bad({"emb_pad": {"a": 1}}, TypeError, "emb_pad['a']")
        bad({"emb_segment_rank": {"a": True}}, TypeError,
            "emb_segment_rank['a']")
        bad({"emb_segment_rank": {"a": -1}}, ValueError,
            "emb_segment_rank['a'] must be >= 0")
        bad({"emb_num_buckets_max": {"a": 0}}, ValueError,
            "emb_num_buckets_max['a'] must be >= 1")
        bad({"emb_wire_dtype": {"a": "int8"}}, ValueError,
            "emb_wire_dtype['a'] must be one of float32, float16, bfloat16")
        bad({"emb_dtype": {"a": tf.int32}}, ValueError,
            "emb_dtype['a'] expects a floating dtype")
        bad({"emb_input_dtype": {"a": "float32"}}, ValueError,
            "emb_input_dtype['a'] expects a integer dtype")
        bad({"emb_dtype": "nonsense"}, ValueError,
            "emb_dtype expects the name of a TensorFlow dtype")
        bad({"emb_device": {"a": None}}, TypeError, "emb_device['a']")
        bad({"emb_unique": {1: True}}, TypeError,
            "keys of a per-column dict are column names")
        bad({"emb_unique": {"": True}}, TypeError, "non-empty str")
        bad({"emb_unique": {"*": True}}, ValueError, "'*' is not one")
        bad({"emb_num_groups": {"a": 2}}, TypeError,
            "per-column dict is accepted by emb_unique, emb_wire_dtype")
        bad({"grad_nbuckets": {"a": 2}}, TypeError, "grad_nbuckets expects")
        expect_raises(lambda: Options(environ={"HB_EMB_UNIQUE": "{'a': 1}"}
                                      ).emb_unique, ValueError,
                      "HB_EMB_UNIQUE")

    def dense_features_reads_each_columns_value():
        """In one graph: column a deduplicates nothing (its own entry),
        b's rows travel as float16 (its own entry); each gets the default
        for the option its dict leaves out; a plain lookup outside
        dense_features gets the defaults. Values equal input_layer's."""
        cols = columns()
        feed_batch = batch(0, rank)

        def build(ph):
            with hb.scope(emb_unique={"a": False},
                          emb_wire_dtype={"b": "float16"}):
                outs = hb.dense_features({k: ph[k] for k in ROWS}, cols)
                with hb.embedding_scope():
                    table = V1.get_variable(
                        "plain_table", initializer=tf.constant(table0("a")))
                plain = tf.nn.embedding_lookup(table, ph["a"])
            return outs + [plain]
        outs, ph, graph = graph_of(build)
        seen = {key: lookup_ops(graph, "dense_features/%s_embedding/" % key)
                for key in ROWS}
        seen["plain"] = lookup_ops(graph, "embedding_lookup/")
        want = {"a": {"unique": [False], "wire": ["float32"]},
                "b": {"unique": [True], "wire": ["float16"]},
                "plain": {"unique": [True], "wire": ["float32"]}}
        check(seen == want, "lookups %r, want %r" % (seen, want))
        with graph.as_default(), V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            got = sess.run(outs, {ph[k]: feed_batch[k] for k in ROWS})

        def plain_input_layer(ph):
            by_column = {}
            V1.feature_column.input_layer({k: ph[k] for k in ROWS}, cols,
                                          cols_to_output_tensors=by_column)
            return [by_column[c] for c in cols]
        ref, ref_ph, ref_graph = graph_of(plain_input_layer)
        with ref_graph.as_default(), V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            want_out = sess.run(ref, {ref_ph[k]: feed_batch[k]
                                      for k in ROWS})
        close(got[0], want_out[0], "b (float16 rows)", rtol=2e-3, atol=2e-3)
        close(got[1], want_out[1], "a")
        close(got[2], table0("a")[feed_batch["a"]], "plain lookup")

    def sgd_training_with_per_column_options():
        """SGD over both columns with per-column emb_unique and
        emb_wire_dtype trains the tables as plain TF on the whole batch
        (the backward pass follows each column's options)."""
        cols = columns()

        def model(features_fn, ph):
            x = tf.concat(features_fn({k: ph[k] for k in ROWS}), 1)
            w = V1.get_variable("w", initializer=tf.constant(
                rank_values(320, 0, (2 * DIM, 1))))
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - ph["label"]))
            return loss, w

        def input_layer(features):
            by_column = {}
            V1.feature_column.input_layer(features, cols,
                                          cols_to_output_tensors=by_column)
            return [by_column[c] for c in cols]

        def plain(ph):
            loss, w = model(input_layer, ph)
            train = V1.train.GradientDescentOptimizer(LR).minimize(loss)
            return train, w
        (train, w), ph, graph = graph_of(plain)
        with graph.as_default(), V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k in range(STEPS):
                whole = whole_batch(k, size)
                sess.run(train, {ph[n]: whole[n] for n in ph})
            tables = {key: sess.run([
                v for v in V1.global_variables() if v.name ==
                "input_layer/%s_embedding/embedding_weights:0" % key][0])
                for key in ROWS}
            want_w = sess.run(w)

        def sharded(ph):
            with hb.scope(emb_unique={"b": False},
                          emb_wire_dtype={"a": "float16"}):
                loss, w = model(lambda f: hb.dense_features(f, cols), ph)
                train = V1.train.GradientDescentOptimizer(LR).minimize(loss)
            return train, w
        (train, w), ph, graph = graph_of(sharded)
        with graph.as_default(), V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k in range(STEPS):
                mine = batch(k, rank)
                sess.run(train, {ph[n]: mine[n] for n in ph})
            for key in ROWS:
                var = [v for v in V1.global_variables() if v.name ==
                       "dense_features/%s_embedding/embedding_weights:0" %
                       key][0]
                info = shard_info(var)
                check(info.partition.num_shards == size, "%s" % (info,))
                # a's rows travel as float16, and the loss, so every
                # gradient, sees them: a float16 tolerance throughout.
                close(sess.run(var), tables[key][
                    info.offset:info.offset + info.rows],
                    "table %s rows" % key, rtol=2e-3, atol=2e-3)
            close(sess.run(w), want_w, "w", rtol=2e-3, atol=2e-3)

    table = {
        "dict_values_validated_and_stored": dict_values_validated_and_stored,
        "lookup_rule": lookup_rule,
        "errors_name_option_and_column": errors_name_option_and_column,
        "dense_features_reads_each_columns_value":
            dense_features_reads_each_columns_value,
        "sgd_training_with_per_column_options":
            sgd_training_with_per_column_options,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
