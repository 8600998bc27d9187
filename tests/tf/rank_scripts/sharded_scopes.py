"""Sharded tables and the scopes and optimizers around them, at any rank
count (run by tests/tf/test_sharded_scopes.py under hbrun).

Every expected value comes from plain single-process TensorFlow or Keras
(a full table, no hbcore) trained on the whole batch of every step (every
rank's batch concatenated in rank order). The table has 23 rows: uneven
blocks at 2 and at 3 ranks, so a rank-0 value broadcast into another
rank's block is a shape error, not a silent copy.
"""
import os
import shutil
import tempfile

import numpy as np

from train_common import (check, Checker, close, expect_raises, rank_values,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402
from hbcore_tf.embedding import is_sharded, shard_info  # noqa: E402

keras = _compat.keras_module()
V1 = tf.compat.v1

CASES = ["nested_sharding_scopes", "v1_adagrad_minimize_in_sharding_scope",
         "v1_adam_minimize_in_sharding_scope",
         "keras_adagrad_on_get_variable_table",
         "keras_adam_on_get_variable_table_checkpoint",
         "v1_optimizer_eager_names_the_table",
         "export_keeps_replicated_layer_whole"]
ROWS, DIM, BATCH, HOT, STEPS, LR = 23, 4, 4, 3, 3, 0.1


def table0():
    return 0.5 * rank_values(5, 0, (ROWS, DIM))


def batch(step, rank):
    """ids [BATCH, HOT] (a duplicate, id 7 on every rank, id 22 - rank on
    this rank only) and labels [BATCH, 1]."""
    rng = np.random.default_rng([500 + step, rank])
    ids = rng.integers(0, ROWS - 4, size=(BATCH, HOT)).astype(np.int64)
    ids[0, 1] = ids[0, 0]
    ids[1, 0] = 7
    ids[2, 2] = ROWS - 1 - rank
    return ids, rank_values(600 + step, rank, (BATCH, 1))


def whole_batch(step, size):
    ids, ys = zip(*[batch(step, r) for r in range(size)])
    return np.concatenate(ids), np.concatenate(ys)


def loss_of(table, ids, y):
    emb = tf.nn.embedding_lookup(table, ids)
    return tf.reduce_mean(tf.square(tf.reduce_sum(emb, [1, 2])[:, None] - y))


def rows_of(full, info):
    return full[info.offset:info.offset + info.rows]


def v1_plain(make_opt, size):
    """Plain TF v1 graph, full table, whole batches: (table, slots)."""
    with tf.Graph().as_default():
        table = V1.get_variable("emb", initializer=tf.constant(table0()))
        ids = V1.placeholder(tf.int64, (None, HOT))
        y = V1.placeholder(tf.float32, (None, 1))
        opt = make_opt()
        train = opt.minimize(loss_of(table, ids, y))
        slots = [opt.get_slot(table, n) for n in sorted(opt.get_slot_names())]
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k in range(STEPS):
                sess.run(train, dict(zip((ids, y), whole_batch(k, size))))
            return sess.run([table] + slots)


def keras_plain(make_opt, size):
    """Plain eager TF, full table, Keras optimizer: (table, slot values by
    name suffix). The gradient's duplicate ids are summed first, the rule
    of sharded tables and of TF's optimizers (docs/embedding.md: Keras 3
    alone would update each duplicate apart)."""
    table = tf.Variable(table0())
    opt = make_opt()
    for k in range(STEPS):
        ids, y = whole_batch(k, size)
        with tf.GradientTape() as tape:
            loss = loss_of(table, ids, y)
        grad = tape.gradient(loss, table)
        unique, index = tf.unique(grad.indices)
        grad = tf.IndexedSlices(tf.math.unsorted_segment_sum(
            grad.values, index, tf.size(unique)), unique, grad.dense_shape)
        opt.apply_gradients([(grad, table)])
    slots = {v.name.split(":")[0].rsplit("_", 1)[-1]: v.numpy()
             for v in opt.variables if tuple(v.shape) == (ROWS, DIM)}
    return table.numpy(), slots


def main():
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)

    def nested_sharding_scopes():
        """hb.embedding_scope inside hb.scope(sharding=True): the table is
        sharded once (each rank holds its block of all 23 rows)."""
        with tf.Graph().as_default():
            with hb.scope(sharding=True):
                with hb.embedding_scope():
                    table = V1.get_variable("emb", initializer=tf.constant(
                        table0()))
                out = tf.nn.embedding_lookup(table, [0, 7, ROWS - 1])
            info = shard_info(table)
            check(info.num_rows == ROWS and info.partition.num_shards == size,
                  "sharded as %s" % (info,))
            check(tuple(table.shape) == (info.rows, DIM),
                  "shard shape %s, info %s" % (table.shape, info))
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                close(sess.run(out), table0()[[0, 7, ROWS - 1]], "lookup")

    def v1_minimize_in_scope(make_opt, slot_count):
        """The optimizer built inside hb.scope(sharding=True), as in
        HybridBackend scripts: the table's slots are its blocks (not
        sharded again), and training equals plain TF."""
        def run():
            with tf.Graph().as_default():
                with hb.scope(sharding=True):
                    table = V1.get_variable("emb", initializer=tf.constant(
                        table0()))
                    ids = V1.placeholder(tf.int64, (None, HOT))
                    y = V1.placeholder(tf.float32, (None, 1))
                    opt = make_opt()
                    train = opt.minimize(loss_of(table, ids, y))
                info = shard_info(table)
                slots = [opt.get_slot(table, n)
                         for n in sorted(opt.get_slot_names())]
                check(len(slots) == slot_count and all(
                    not is_sharded(s) and tuple(s.shape) == (info.rows, DIM)
                    for s in slots),
                    "slots %s" % [(s.name, s.shape) for s in slots])
                with V1.Session() as sess:
                    sess.run(V1.global_variables_initializer())
                    for k in range(STEPS):
                        sess.run(train, dict(zip((ids, y), batch(k, rank))))
                    got = sess.run([table] + slots)
            expected = v1_plain(make_opt, size)
            for g, e, what in zip(got, expected, ["table"] + [
                    s.name for s in slots]):
                close(g, rows_of(e, info), what, rtol=1e-4, atol=1e-5)
        return run

    def keras_on_get_variable_table(table_name, make_opt, slot_names, checkpoint):
        """A Keras optimizer with slots, made and stepped eagerly inside
        hb.scope, on a table made with get_variable: its slots are blocks
        of the table's slots (rank 0's initial values are not broadcast
        into them), training equals plain Keras, and with ``checkpoint``
        a tf.train.Checkpoint stores the whole slots."""
        def run():
            with hb.scope():
                with hb.embedding_scope():
                    table = V1.get_variable(
                        table_name, initializer=tf.constant(table0()))
                opt = make_opt()
                for k in range(STEPS):
                    ids, y = batch(k, rank)
                    with tf.GradientTape() as tape:
                        loss = loss_of(table, ids, y)
                    opt.apply_gradients([(tape.gradient(loss, table), table)])
            info = shard_info(table)
            full, slots = keras_plain(make_opt, size)
            close(table.numpy(), rows_of(full, info), "table",
                  rtol=1e-4, atol=1e-5)
            mine = {v.name.split(":")[0].rsplit("_", 1)[-1]: v
                    for v in opt.variables if len(v.shape) == 2}
            check(sorted(mine) == sorted(slot_names) == sorted(slots),
                  "slots %s, plain %s" % (sorted(mine), sorted(slots)))
            for name in slot_names:
                check(tuple(mine[name].shape) == (info.rows, DIM),
                      "slot %s shape %s" % (name, mine[name].shape))
                close(mine[name].numpy(), rows_of(slots[name], info),
                      "slot " + name, rtol=1e-4, atol=1e-5)
            if not checkpoint:
                return
            folder = hbcore.broadcast_object(
                tempfile.mkdtemp(prefix="hb_scopes_ck_") if rank == 0
                else None, 0, name="scopes_ck_dir")
            try:
                path = tf.train.Checkpoint(table=table, opt=opt).save(
                    os.path.join(folder, "ck"))
                reader = tf.train.load_checkpoint(path)
                shapes = reader.get_variable_to_shape_map()
                whole = {k: reader.get_tensor(k) for k, s in shapes.items()
                         if s == [ROWS, DIM]}
                table_key = "table/.ATTRIBUTES/VARIABLE_VALUE"
                check(table_key in whole and len(whole) == 1 + len(
                    slot_names), "whole tensors in the checkpoint: %s" % (
                        shapes,))
                close(whole.pop(table_key), full, "saved table",
                      rtol=1e-4, atol=1e-5)
                saved = sorted(whole.values(), key=lambda a: float(a.sum()))
                plain = sorted(slots.values(), key=lambda a: float(a.sum()))
                for s, p in zip(saved, plain):
                    close(s, p, "saved slot", rtol=1e-4, atol=1e-5)
            finally:
                hbcore.barrier()
                if rank == 0:
                    shutil.rmtree(folder, ignore_errors=True)
        return run

    def v1_optimizer_eager_names_the_table():
        """A tf.compat.v1 optimizer with slots cannot step a sharded table
        eagerly (TF's slot_creator needs a graph op): every rank gets a
        NotImplementedError naming the table, not a broadcast error or
        TF's AttributeError."""
        with hb.scope():
            with hb.embedding_scope():
                table = V1.get_variable("eager_v1_table",
                                        initializer=tf.constant(table0()))
            opt = V1.train.AdagradOptimizer(LR)
            ids, y = batch(0, rank)
            with tf.GradientTape() as tape:
                loss = loss_of(table, ids, y)
            grad = tape.gradient(loss, table)
            expect_raises(lambda: opt.apply_gradients([(grad, table)]),
                          NotImplementedError, "'eager_v1_table'")
        hbcore.barrier()

    def export_keeps_replicated_layer_whole():
        """export_plain_model outside the hb.scope whose options left a
        ShardedEmbedding replicated: the copy holds the whole table (it is
        not sharded under the options in force at export)."""
        small_table = rank_values(8, 0, (ROWS, DIM))
        with hb.scope(emb_min_rows_to_shard=ROWS + 1):
            ids = keras.Input((HOT,), dtype="int64")
            small = hb.keras.layers.ShardedEmbedding(
                ROWS, DIM, name="small",
                embeddings_initializer=keras.initializers.Constant(
                    small_table))
            big = hb.keras.layers.ShardedEmbedding(
                ROWS + 1, DIM, name="big",
                embeddings_initializer=keras.initializers.Constant(
                    rank_values(9, 0, (ROWS + 1, DIM))))
            flat = keras.layers.Concatenate()(
                [keras.layers.Flatten()(small(ids)),
                 keras.layers.Flatten()(big(ids))])
            model = keras.Model(ids, keras.layers.Dense(1, name="out")(flat))
        check(small.shard_info is None and big.shard_info is not None,
              "small %s, big %s" % (small.shard_info, big.shard_info))
        probe = batch(0, 0)[0]
        want = model(probe).numpy()  # collective: same ids on every rank
        plain = hb.keras.layers.export_plain_model(model)
        layer = plain.get_layer("small")
        check(getattr(layer, "shard_info", None) is None and
              tuple(layer.get_weights()[0].shape) == (ROWS, DIM),
              "exported small layer %s %s" % (
                  type(layer).__name__,
                  [w.shape for w in layer.get_weights()]))
        close(layer.get_weights()[0], small_table, "exported small table")
        close(plain(probe), want, "plain model's predictions")

    table = {
        "nested_sharding_scopes": nested_sharding_scopes,
        "v1_adagrad_minimize_in_sharding_scope": v1_minimize_in_scope(
            lambda: V1.train.AdagradOptimizer(LR), 1),
        "v1_adam_minimize_in_sharding_scope": v1_minimize_in_scope(
            lambda: V1.train.AdamOptimizer(LR), 2),
        "keras_adagrad_on_get_variable_table": keras_on_get_variable_table(
            "emb_adagrad", lambda: keras.optimizers.Adagrad(LR),
            ["accumulator"], False),
        "keras_adam_on_get_variable_table_checkpoint":
            keras_on_get_variable_table(
                "emb_adam", lambda: keras.optimizers.Adam(LR),
                ["momentum", "velocity"], True),
        "v1_optimizer_eager_names_the_table":
            v1_optimizer_eager_names_the_table,
        "export_keeps_replicated_layer_whole":
            export_keeps_replicated_layer_whole,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
