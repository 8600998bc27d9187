"""hb.keras.layers.ShardedEmbedding cases, with Keras 3 by default or
tf_keras when TF_USE_LEGACY_KERAS=1. Run by tests/tf/test_sharded_keras.py
under hbrun at 2 and 3 ranks.

Every expected value is computed here without the code under test:
training cases compare against plain single-process Keras with
``keras.layers.Embedding`` trained on the whole batch of every step (the
concatenation of every rank's batch, rank order) from rank 0's initial
values; lookups against ``tf.gather`` / ``tf.nn.safe_embedding_lookup_sparse``
on the whole table (a plain tf.Variable); row counts from the row-wise
split formula. The whole table of a sharded layer is read with
``full_table()`` (an allgather) or from a file a plain model wrote.
"""
import os
import shutil
import tempfile

import numpy as np

from train_common import (check, Checker, close, dense_gradient_step,
                          expect_raises, identical_on_all_ranks, rank_values,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
import hbcore_tf.keras as hvd  # noqa: E402
from hbcore_tf._base import compat as _compat  # noqa: E402

keras = _compat.keras_module()

CASES = ["fit_sgd", "fit_adagrad", "fit_adam", "fit_adagrad_no_unique",
         "fit_adam_no_unique", "fit_replicated_small_table",
         "fit_distributed_optimizer", "memory_per_rank", "dense_ids_any_shape",
         "ragged_combiners", "ragged_no_combiner", "sparse_combiners",
         "ragged_gradients", "save_sharded_load_plain",
         "save_plain_load_sharded", "save_keras_file_load_model",
         "save_outside_scope", "save_tf_checkpoint_format",
         "load_plain_tf_checkpoint", "legacy_h5_files",
         "get_config_round_trip", "bad_combiner", "export_plain_model",
         "out_of_range_id"]
V = 11        # table rows (uneven split at 2 and 3 ranks)
D = 3         # embedding dimension
F = 3         # ids per example
BATCH = 4     # examples per rank and step
STEPS = 3


def table0(seed=1):
    """The initial whole table (the same on every rank)."""
    return rank_values(seed, 0, (V, D))


def dense_init(rank):
    """Rank ``rank``'s initial Dense kernel and bias (ranks differ: the
    broadcast from rank 0 must reach them, and not the table)."""
    return 0.5 * rank_values(20, rank, (F * D, 1)), \
        0.5 * rank_values(21, rank, (1,))


def batch(step, rank):
    """Rank ``rank``'s ids and targets of a step: a duplicate id inside the
    batch, and id V-1 only on rank 0 (ids some ranks never see)."""
    rng = np.random.default_rng([30 + step, rank])
    ids = rng.integers(0, V - 1, size=(BATCH, F))
    ids[1, 0] = ids[0, 0]
    ids[2, 1] = ids[0, 0]
    if rank == 0:
        ids[3, 2] = V - 1
    return ids.astype(np.int64), rank_values(40 + step, rank, (BATCH, 1))


def local_rows(rank, size):
    """Rows rank ``rank`` holds of a V-row table (row-wise split)."""
    return V // size + (1 if rank < V % size else 0)


def row_offset(rank, size):
    return sum(local_rows(r, size) for r in range(rank))


def model_of(embedding, rank):
    kernel, bias = dense_init(rank)
    ids = keras.Input((F,), dtype="int64")
    out = keras.layers.Dense(
        1, name="out", kernel_initializer=keras.initializers.Constant(kernel),
        bias_initializer=keras.initializers.Constant(bias))(
            keras.layers.Flatten()(embedding(ids)))
    return keras.Model(ids, out)


def sharded(combiner=None, name="emb", table=None, rows=V):
    return hb.keras.layers.ShardedEmbedding(
        rows, D, embeddings_initializer=keras.initializers.Constant(
            table0() if table is None else table),
        combiner=combiner, name=name)


def plain_embedding(table=None, name="emb"):
    return keras.layers.Embedding(
        V, D, embeddings_initializer=keras.initializers.Constant(
            table0() if table is None else table), name=name)


OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(0.2),
    "adagrad": lambda: keras.optimizers.Adagrad(0.3),
    "adam": lambda: keras.optimizers.Adam(0.05),
}


def whole_batch(step, size):
    xs, ys = zip(*[batch(step, r) for r in range(size)])
    return np.concatenate(xs), np.concatenate(ys)


def expected_training(opt_name, size, per_lookup=False):
    """Plain Keras, one process, Embedding, whole batch per step.

    Args:
        per_lookup: train with model.fit, where the table's gradient is an
            IndexedSlices with one entry per lookup: Keras 3's optimizers
            square each entry (Adagrad, Adam), so duplicate ids count
            apart. Otherwise the gradient's duplicates are summed first
            (made dense: TensorFlow's sparse-update semantics, which
            tf_keras' optimizers also apply), as the sharded table's
            gradient is when ids are deduplicated (emb_unique).
    """
    model = model_of(plain_embedding(), 0)
    opt = OPTIMIZERS[opt_name]()
    model.compile(optimizer=opt, loss="mse")
    if per_lookup:
        xs, ys = zip(*[whole_batch(k, size) for k in range(STEPS)])
        model.fit(np.concatenate(xs), np.concatenate(ys),
                  batch_size=BATCH * size, epochs=1, shuffle=False,
                  verbose=0)
    else:
        for k in range(STEPS):
            x, y = whole_batch(k, size)
            dense_gradient_step(model, opt, x, y)
    return model.get_layer("emb").get_weights()[0], \
        model.get_layer("out").get_weights()


def my_data(rank):
    xs, ys = zip(*[batch(k, rank) for k in range(STEPS)])
    return np.concatenate(xs), np.concatenate(ys)


def check_trained(model, opt_name, size, what, per_lookup=False):
    emb = model.get_layer("emb")
    table = emb.full_table()
    dense = model.get_layer("out").get_weights()
    identical_on_all_ranks([table] + dense, what)
    want_table, want_dense = expected_training(opt_name, size, per_lookup)
    close(table, want_table, what + ": table", rtol=1e-5, atol=1e-5)
    for i, (a, b) in enumerate(zip(dense, want_dense)):
        close(a, b, "%s: dense weight %d" % (what, i), rtol=1e-5, atol=1e-5)


def shared_dir(prefix):
    """A temporary directory named by rank 0 (all ranks share a disk)."""
    return hbcore.broadcast_object(
        tempfile.mkdtemp(prefix=prefix) if hbcore.rank() == 0 else None, 0)


def ragged_ids_of(seed, rank):
    """Rank ``rank``'s ragged multi-hot ids: 6 bags, an empty one, one
    with a duplicate id."""
    rng = np.random.default_rng([seed, rank])
    rows = [list(rng.integers(0, V, size=n)) for n in
            rng.integers(0, 4, size=6)]
    rows[1] = []
    rows[2] = [rows[0][0]] * 2 if rows[0] else [3, 3]
    return tf.ragged.constant(rows, dtype=tf.int64)


def load_into_plain_model(path, folder, table):
    """Loads the weights file ``path`` into a plain one-process model and
    checks it holds ``table`` and rank 0's Dense weights (the other ranks'
    differ unless broadcast, so only a file rank 0 wrote has them); then
    removes ``folder``."""
    try:
        plain = model_of(plain_embedding(table=np.zeros((V, D), np.float32)),
                         1)
        plain.load_weights(path)
        close(plain.get_layer("emb").get_weights()[0], table,
              "plain table loaded from the sharded file")
        for a, b in zip(plain.get_layer("out").get_weights(), dense_init(0)):
            close(a, b, "dense weights in the file (rank 0's)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def on_rank0(fn):
    """Runs ``fn`` on rank 0 only; every rank then meets at a barrier
    (also when ``fn`` failed, so the ranks stay in step), and rank 0
    re-raises."""
    error = None
    if hbcore.rank() == 0:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - re-raised after the barrier
            error = exc
    hbcore.barrier()
    if error is not None:
        raise error


def whole_table_variable(table):
    return tf.Variable(table)


def main():
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)

    def fit_case(opt_name, **scope_options):
        with hb.scope(**scope_options):
            model = model_of(sharded(), rank)
            model.compile(optimizer=OPTIMIZERS[opt_name](), loss="mse")
            x, y = my_data(rank)
            model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False,
                      verbose=0)
        return model

    def fit_sharded(opt_name, **scope_options):
        model = fit_case(opt_name, **scope_options)
        emb = model.get_layer("emb")
        check(emb.shard_info is not None, "table not sharded")
        check_trained(model, opt_name, size, opt_name,
                      per_lookup=not scope_options.get("emb_unique", True))

    def fit_replicated_small_table():
        model = fit_case("sgd", emb_min_rows_to_shard=V + 1)
        emb = model.get_layer("emb")
        check(emb.shard_info is None, "small table sharded")
        check(tuple(emb.embeddings.shape) == (V, D),
              "replicated shape %s" % (emb.embeddings.shape,))
        check_trained(model, "sgd", size, "replicated")

    def fit_distributed_optimizer():
        # Horovod style, outside hb.scope: DistributedOptimizer and the
        # broadcast callback (which must leave the shards alone).
        model = model_of(sharded(), rank)
        model.compile(optimizer=hvd.DistributedOptimizer(
            OPTIMIZERS["adagrad"]()), loss="mse")
        x, y = my_data(rank)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        check_trained(model, "adagrad", size, "DistributedOptimizer")

    def memory_per_rank():
        with hb.scope():
            model = model_of(sharded(), rank)
            opt = keras.optimizers.Adagrad(0.1)
            model.compile(optimizer=opt, loss="mse")
            x, y = my_data(rank)
            model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0)
        emb = model.get_layer("emb")
        want = (local_rows(rank, size), D)
        check(tuple(emb.embeddings.shape) == want, "shard shape %s, want %s"
              % (tuple(emb.embeddings.shape), want))
        check(len(emb.weights) == 1 and emb.weights[0].name.split(":")[0]
              .split("/")[-1] == "embeddings",
              "weights %s" % [w.name for w in emb.weights])
        # The optimizer's slots of the table are shards too.
        slots = [v for v in _compat.optimizer_variables(opt)
                 if tuple(v.shape)[1:] == (D,)]
        check(len(slots) == 1, "%d table-shaped slots" % len(slots))
        check(tuple(slots[0].shape) == want, "slot shape %s" % (
            tuple(slots[0].shape),))
        info = emb.shard_info
        check(info.offset == row_offset(rank, size), "offset %d" % info.offset)

    def dense_ids_any_shape():
        layer = sharded()
        table = table0()
        for shape in [(5,), (2, 3), (2, 2, 2)]:
            ids = np.random.default_rng([50, rank]).integers(0, V, size=shape)
            close(layer(ids), table[ids], "ids of shape %s" % (shape,))
        scalar = layer(np.int64(rank % V))
        close(scalar, table[rank % V], "scalar id")

    def ragged_ids(seed):
        return ragged_ids_of(seed, rank)

    def ragged_combiners():
        full = whole_table_variable(table0())
        for combiner in ("sum", "mean", "sqrtn"):
            layer = sharded(combiner=combiner, name="bag_" + combiner)
            ids = ragged_ids(60)
            want = tf.nn.safe_embedding_lookup_sparse(
                full, ids.to_sparse(), combiner=combiner)
            close(layer(ids), want, "ragged " + combiner)
            # Two ragged levels: the last one is the bag.
            nested = tf.RaggedTensor.from_row_lengths(ids, [2, 0, 4])
            got = layer(nested)
            check(isinstance(got, tf.RaggedTensor), "nested ragged output")
            close(got.flat_values, want, "nested ragged " + combiner)

    def ragged_no_combiner():
        layer = sharded()
        ids = ragged_ids(61)
        got = layer(ids)
        check(isinstance(got, tf.RaggedTensor), "type %s" % type(got))
        check(got.row_splits.numpy().tolist() ==
              ids.row_splits.numpy().tolist(), "row splits")
        close(got.flat_values, table0()[ids.flat_values.numpy()], "rows")

    def sparse_combiners():
        full = whole_table_variable(table0())
        rng = np.random.default_rng([62, rank])
        # Gaps in the columns (not ragged-right) and an empty row.
        indices = [[0, 0], [0, 3], [0, 4], [2, 1], [3, 0], [3, 2]]
        values = rng.integers(0, V, size=len(indices))
        ids = tf.SparseTensor(indices, values, [4, 5])
        for combiner in ("sum", "mean", "sqrtn"):
            layer = sharded(combiner=combiner, name="sparse_" + combiner)
            want = tf.nn.safe_embedding_lookup_sparse(full, ids,
                                                      combiner=combiner)
            close(layer(ids), want, "sparse " + combiner)
        # Three dimensions: bags over the last one.
        ids3 = tf.sparse.reshape(ids, [2, 2, 5])
        layer = sharded(combiner="mean", name="sparse3")
        want = tf.nn.safe_embedding_lookup_sparse(full, ids3, combiner="mean")
        close(layer(ids3), want, "3-d sparse mean")
        expect_raises(lambda: sharded(name="sparse_none")(ids), ValueError,
                      "combiner")

    def ragged_gradients():
        # The shard's gradient is the mean over ranks of each rank's loss
        # gradient on the whole table, restricted to this rank's rows.
        begin = row_offset(rank, size)
        end = begin + local_rows(rank, size)
        for combiner in ("sum", "mean", "sqrtn"):
            layer = sharded(combiner=combiner, name="grad_" + combiner)
            weight = rank_values(63, rank, (6, D))
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(weight * layer(ragged_ids(64)))
            grad = tape.gradient(loss, layer.trainable_variables)[0]
            want = np.zeros((V, D))
            for r in range(size):
                full = whole_table_variable(table0())
                ids = ragged_ids_of(64, r)
                with tf.GradientTape() as tape:
                    loss_r = tf.reduce_sum(
                        rank_values(63, r, (6, D)) *
                        tf.nn.safe_embedding_lookup_sparse(
                            full, ids.to_sparse(), combiner=combiner))
                want += tf.convert_to_tensor(tape.gradient(loss_r, full))
            close(tf.convert_to_tensor(grad), want[begin:end] / size,
                  "gradient " + combiner)

    def save_sharded_load_plain():
        folder = shared_dir("hb_sk_save_")
        path = os.path.join(folder, "sharded.weights.h5")
        trained = table0(seed=70)
        with hb.scope():
            model = model_of(sharded(table=trained), rank)
        model.save_weights(path)   # collective; rank 0 writes
        check(os.path.exists(path), "no file after save_weights")
        check(os.listdir(folder) == ["sharded.weights.h5"],
              "files %s" % os.listdir(folder))

        on_rank0(lambda: load_into_plain_model(path, folder, trained))

    def save_plain_load_sharded():
        folder = shared_dir("hb_sk_load_")
        path = os.path.join(folder, "plain.weights.h5")
        saved = table0(seed=71)
        on_rank0(lambda: model_of(plain_embedding(table=saved),
                                  0).save_weights(path))
        with hb.scope():
            model = model_of(sharded(table=np.zeros((V, D), np.float32)),
                             rank)
        model.load_weights(path)
        emb = model.get_layer("emb")
        begin = row_offset(rank, size)
        close(np.asarray(emb.embeddings), saved[begin:begin + local_rows(
            rank, size)], "this rank's rows")
        close(emb.full_table(), saved, "whole table")
        for a, b in zip(model.get_layer("out").get_weights(), dense_init(0)):
            close(a, b, "dense weights")
        on_rank0(lambda: shutil.rmtree(folder, ignore_errors=True))

    def save_keras_file_load_model():
        """A compiled model trained with Adagrad, saved to .keras and
        loaded at this world size: the table is whole in the file, and so
        is its accumulator slot; each rank loads its rows of both (before,
        Keras stored rank 0's slot rows and loaded them on every rank)."""
        from hbcore_tf._parallel.data_parallel import _optimizer_variables

        folder = shared_dir("hb_sk_keras_")
        path = os.path.join(folder, "model.keras")
        saved = table0(seed=72)
        with hb.scope():
            model = model_of(sharded(table=saved), rank)
            model.compile(optimizer=OPTIMIZERS["adagrad"](), loss="mse")
            x, y = my_data(rank)
            model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False,
                      verbose=0)

        def accumulator(of):
            local = (local_rows(rank, size), D)
            slots = [v for v in _optimizer_variables(of.optimizer)
                     if tuple(v.shape) == local and v is not
                     of.get_layer("emb").embeddings]
            check(len(slots) == 1, "accumulator slots %s" % slots)
            return np.asarray(slots[0])

        table = model.get_layer("emb").full_table()
        whole = np.concatenate(hbcore.allgather_object(accumulator(model)))
        model.save(path)
        loaded = keras.models.load_model(path)
        emb = loaded.get_layer("emb")
        check(emb.shard_info is not None, "loaded table not sharded")
        close(emb.full_table(), table, "loaded whole table")
        begin = row_offset(rank, size)
        close(accumulator(loaded), whole[begin:begin + local_rows(rank, size)],
              "this rank's rows of the loaded accumulator")
        hbcore.barrier()  # every rank has loaded before rank 0 removes
        on_rank0(lambda: shutil.rmtree(folder, ignore_errors=True))

    def save_outside_scope():
        """A model built outside hb.scope(): its ranks' Dense weights
        differ (nothing broadcasts them), so the file holding rank 0's
        shows that rank 0 alone wrote it; each save format once."""
        folder = shared_dir("hb_sk_outside_")
        trained = table0(seed=73)
        model = model_of(sharded(table=trained), rank)
        model.save_weights(os.path.join(folder, "out.weights.h5"))
        model.save(os.path.join(folder, "out.keras"))
        check(sorted(os.listdir(folder)) == ["out.keras", "out.weights.h5"],
              "files %s" % os.listdir(folder))

        on_rank0(lambda: load_into_plain_model(
            os.path.join(folder, "out.weights.h5"), folder, trained))

    def save_tf_checkpoint_format():
        """TensorFlow checkpoints of a model trained with Adagrad outside
        hb.scope (the ranks' Dense weights differ): tf_keras's
        save_weights to a path without .h5, or tf.train.Checkpoint of a
        Keras 3 model and its optimizer (Keras 3's save_weights has no such
        format: NotImplementedError). Every rank calls; the checkpoint
        holds the whole table, the whole accumulator slot and rank 0's
        Dense weights; it loads into a sharded model at this world size and
        into a plain one-process model."""
        from hbcore_tf._parallel.data_parallel import _optimizer_variables

        legacy = _compat.use_legacy_keras()
        folder = shared_dir("hb_sk_tfckpt_")
        path = os.path.join(folder, "weights")
        model = model_of(sharded(table=table0(seed=74)), rank)
        model.compile(optimizer=OPTIMIZERS["adagrad"](), loss="mse")
        x, y = my_data(rank)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        table = model.get_layer("emb").full_table()
        dense = hbcore.broadcast_object(
            model.get_layer("out").get_weights(), 0)
        local = (local_rows(rank, size), D)
        slots = [v for v in _optimizer_variables(model.optimizer)
                 if tuple(v.shape) == local and v is not
                 model.get_layer("emb").embeddings]
        check(len(slots) == 1, "accumulator slots %s" % slots)
        accumulator = np.concatenate(hbcore.allgather_object(
            np.asarray(slots[0])))

        def read(target):
            if legacy:
                return target.load_weights(path)
            return tf.train.Checkpoint(model=target).read(path)

        if legacy:
            model.save_weights(path)
        else:
            expect_raises(lambda: model.save_weights(path),
                          NotImplementedError, ".weights.h5")
            tf.train.Checkpoint(model=model,
                                optimizer=model.optimizer).write(path)
        # Whole tensors of the table's shape: the table and its slot
        # (tf_keras and Keras 3 key the optimizer's variables by position).
        whole = [tf.train.load_variable(path, name) for name, shape in
                 tf.train.list_variables(path) if shape == [V, D]]
        check(len(whole) >= 2, "whole [V, D] tensors stored: %d" % len(whole))
        for want, what in ((table, "table"), (accumulator, "accumulator")):
            check(any(np.allclose(w, want, rtol=1e-6) for w in whole),
                  "the whole %s is not in the checkpoint" % what)
        again = model_of(sharded(table=np.zeros((V, D), np.float32)), rank)
        read(again).expect_partial()
        close(again.get_layer("emb").full_table(), table,
              "whole table loaded into the sharded model")
        for a, b in zip(again.get_layer("out").get_weights(), dense):
            close(a, b, "dense weights loaded (rank 0's)")
        hbcore.barrier()  # every rank has read before rank 0 removes

        def load_plain():
            try:
                plain = model_of(plain_embedding(
                    table=np.zeros((V, D), np.float32)), 1)
                read(plain).expect_partial()
                close(plain.get_layer("emb").get_weights()[0], table,
                      "plain table loaded from the sharded checkpoint")
                for a, b in zip(plain.get_layer("out").get_weights(), dense):
                    close(a, b, "dense weights in the checkpoint")
                handoff = os.environ.get("HB_KCKPT_OUT")
                if handoff:  # for the launch at another world size
                    for name in os.listdir(folder):
                        shutil.copy(os.path.join(folder, name), handoff)
                    np.savez(os.path.join(handoff, "expected.npz"),
                             table=table, *dense)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        on_rank0(load_plain)

        # A checkpoint the launch at 2 ranks wrote (test_sharded_keras
        # passes it to the launches at 3 ranks and at world size 1): each
        # rank reads its rows of it, resharded.
        handoff = os.environ.get("HB_KCKPT_IN")
        if handoff:
            want = np.load(os.path.join(handoff, "expected.npz"))
            path = os.path.join(handoff, "weights")
            other = model_of(sharded(table=np.zeros((V, D), np.float32)),
                             rank)
            read(other).expect_partial()
            close(other.get_layer("emb").full_table(), want["table"],
                  "table restored from the 2-rank checkpoint")
            for i, a in enumerate(other.get_layer("out").get_weights()):
                close(a, want["arr_%d" % i], "dense weight %d restored" % i)

    def load_plain_tf_checkpoint():
        """A TensorFlow checkpoint of a plain one-process model (rank 0
        writes it: tf_keras save_weights, Keras 3 tf.train.Checkpoint)
        loads into the sharded model, each rank reading its rows."""
        folder = shared_dir("hb_sk_plainckpt_")
        path = os.path.join(folder, "plain")
        saved = table0(seed=75)

        def write():
            plain = model_of(plain_embedding(table=saved), 0)
            if _compat.use_legacy_keras():
                plain.save_weights(path)
            else:
                tf.train.Checkpoint(model=plain).write(path)
        on_rank0(write)
        model = model_of(sharded(table=np.zeros((V, D), np.float32)), rank)
        if _compat.use_legacy_keras():
            model.load_weights(path).assert_existing_objects_matched()
        else:
            tf.train.Checkpoint(model=model).read(
                path).assert_existing_objects_matched()
        begin = row_offset(rank, size)
        close(np.asarray(model.get_layer("emb").embeddings),
              saved[begin:begin + local_rows(rank, size)], "this rank's rows")
        for a, b in zip(model.get_layer("out").get_weights(), dense_init(0)):
            close(a, b, "dense weights (rank 0's)")
        hbcore.barrier()  # every rank has read before rank 0 removes
        on_rank0(lambda: shutil.rmtree(folder, ignore_errors=True))

    def legacy_h5_files():
        """tf_keras's legacy HDF5 files (save_weights / save to .h5):
        collective, rank 0 writes the whole table (and with save, the whole
        accumulator slot) as a plain Embedding model's file holds it; the
        file loads into a plain one-process model, a plain model's file
        into the sharded one, and load_model restores every rank's rows of
        the table and of its slot. Keras 3 has no such format: a model with
        sharded tables refuses it (NotImplementedError)."""
        from hbcore_tf._parallel.data_parallel import _optimizer_variables

        folder = shared_dir("hb_sk_legacy_h5_")
        weights_path = os.path.join(folder, "w.h5")
        trained = table0(seed=76)
        with hb.scope():
            model = model_of(sharded(table=trained), rank)
        if not _compat.use_legacy_keras():
            expect_raises(lambda: model.save_weights(weights_path),
                          NotImplementedError, ".weights.h5")
            expect_raises(lambda: model.save(os.path.join(folder, "m.h5")),
                          NotImplementedError, ".keras")
            on_rank0(lambda: shutil.rmtree(folder, ignore_errors=True))
            return
        import h5py

        model.save_weights(weights_path)  # every rank; rank 0 writes
        check(os.listdir(folder) == ["w.h5"], "files %s" % os.listdir(folder))
        hbcore.barrier()
        on_rank0(lambda: load_into_plain_model(
            weights_path, os.path.join(folder, "unused"), trained))

        plain_path = os.path.join(folder, "plain.h5")
        saved = table0(seed=77)
        on_rank0(lambda: model_of(plain_embedding(table=saved),
                                  0).save_weights(plain_path))
        model.load_weights(plain_path)
        begin = row_offset(rank, size)
        close(np.asarray(model.get_layer("emb").embeddings),
              saved[begin:begin + local_rows(rank, size)],
              "this rank's rows of a plain model's .h5 file")

        # save / load_model: a model whose config tf_keras can read back
        # from an .h5 file (no numpy values in initializers).
        local = (local_rows(rank, size), D)
        with hb.scope():
            ids = keras.Input((F,), dtype="int64")
            layer = hb.keras.layers.ShardedEmbedding(
                V, D, embeddings_initializer="zeros", name="emb")
            model = keras.Model(ids, keras.layers.Dense(1, name="out")(
                keras.layers.Flatten()(layer(ids))))
        layer.embeddings.assign(trained[begin:begin + local[0]])
        model.compile(optimizer=OPTIMIZERS["adagrad"](), loss="mse")
        x, y = my_data(rank)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        table = layer.full_table()
        slots = [v for v in _optimizer_variables(model.optimizer)
                 if tuple(v.shape) == local and v is not layer.embeddings]
        check(len(slots) == 1, "accumulator slots %s" % slots)
        accumulator = np.concatenate(hbcore.allgather_object(
            np.asarray(slots[0])))
        model_path = os.path.join(folder, "m.h5")
        model.save(model_path)  # every rank; rank 0 writes

        def check_file():
            with h5py.File(model_path, "r") as f:
                stored = []
                f.visititems(lambda name, item: stored.append(
                    np.asarray(item)) if isinstance(item, h5py.Dataset)
                    and item.shape == (V, D) else None)
            check(len(stored) == 2, "[V, D] datasets in the file: %d"
                  % len(stored))
            for want, what in ((table, "table"), (accumulator, "slot")):
                check(any(np.allclose(w, want, rtol=1e-6) for w in stored),
                      "the whole %s is not in the .h5 file" % what)
        on_rank0(check_file)

        with hb.scope():
            loaded = keras.models.load_model(model_path)
        emb = loaded.get_layer("emb")
        check(emb.shard_info is not None, "loaded table not sharded")
        close(emb.full_table(), table, "loaded whole table")
        loaded_slots = [v for v in _optimizer_variables(loaded.optimizer)
                        if tuple(v.shape) == local and v is not
                        emb.embeddings]
        check(len(loaded_slots) == 1, "loaded slots %s" % loaded_slots)
        close(np.asarray(loaded_slots[0]),
              accumulator[begin:begin + local[0]],
              "this rank's rows of the loaded accumulator")
        hbcore.barrier()  # every rank has read before rank 0 removes
        on_rank0(lambda: shutil.rmtree(folder, ignore_errors=True))

    def get_config_round_trip():
        cls = hb.keras.layers.ShardedEmbedding
        layer = cls(V, D, embeddings_initializer=keras.initializers
                    .RandomNormal(stddev=0.5, seed=3),
                    embeddings_regularizer=keras.regularizers.L2(0.01),
                    embeddings_constraint=keras.constraints.UnitNorm(axis=1),
                    mask_zero=True, combiner="sqrtn", name="cfg")
        config = layer.get_config()
        for key, value in [("input_dim", V), ("output_dim", D),
                           ("mask_zero", True), ("combiner", "sqrtn"),
                           ("name", "cfg")]:
            check(config[key] == value, "%s: %r" % (key, config[key]))
        again = cls.from_config(config)
        check(again.get_config() == config, "from_config round trip")
        if _compat.use_legacy_keras():
            blob = keras.layers.serialize(layer)
            back = keras.layers.deserialize(blob)
        else:
            blob = keras.saving.serialize_keras_object(layer)
            back = keras.saving.deserialize_keras_object(blob)
        check(type(back) is cls and back.get_config() == config,
              "serialize round trip: %r" % type(back))
        check("hbcore_tf>ShardedEmbedding" in str(blob),
              "registered name missing in %s" % blob)

    def bad_combiner():
        expect_raises(lambda: hb.keras.layers.ShardedEmbedding(
            V, D, combiner="max"), ValueError, "'max'")

    def export_plain_model():
        folder = shared_dir("hb_sk_export_")
        ids = keras.Input((F,), dtype="int64")
        first = sharded(name="emb")(ids)
        bags = sharded(combiner="mean", name="bag", table=table0(seed=73))(ids)
        out = keras.layers.Dense(1, name="out")(keras.layers.Concatenate()(
            [keras.layers.Flatten()(first), bags]))
        with hb.scope():
            model = keras.Model(ids, out)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
            x, y = my_data(rank)
            model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False,
                      verbose=0)
        probe = batch(9, 0)[0]
        want = model(probe).numpy()       # collective: every rank, same ids
        plain = hb.keras.layers.export_plain_model(model)
        check(type(plain.get_layer("emb")).__name__ == "Embedding",
              "emb exported as %s" % type(plain.get_layer("emb")))
        close(plain(probe), want, "plain model's predictions")

        def save_and_serve():
            try:
                tf.saved_model.save(plain, os.path.join(folder, "sm"))
                with open(os.path.join(folder, "sm", "saved_model.pb"),
                          "rb") as f:
                    check(b"Hbcore" not in f.read(),
                          "hbcore ops in the SavedModel")
                loaded = tf.saved_model.load(os.path.join(folder, "sm"))
                serve = loaded.signatures["serving_default"]
                outputs = serve(tf.constant(probe))
                close(list(outputs.values())[0], want,
                      "SavedModel predictions")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        on_rank0(save_and_serve)

    def out_of_range_id():
        # Rank 0 looks up V (outside the table); the others look up valid
        # ids. Rank 0 gets the error naming the table; nobody hangs.
        layer = sharded(name="bad_table")
        ids = np.array([[1, V if rank == 0 else 2]], np.int64)
        if rank == 0:
            expect_raises(lambda: layer(ids), tf.errors.InvalidArgumentError,
                          "bad_table")
        else:
            close(layer(ids), table0()[[[1, 2]]], "valid lookup")
        identical_on_all_ranks([np.arange(3)], "collectives after the error")

    table = {
        "fit_sgd": lambda: fit_sharded("sgd"),
        "fit_adagrad": lambda: fit_sharded("adagrad"),
        "fit_adam": lambda: fit_sharded("adam"),
        # Without deduplication the table's gradient has one entry per
        # lookup, as plain Keras' (see expected_training).
        "fit_adagrad_no_unique": lambda: fit_sharded("adagrad",
                                                     emb_unique=False),
        "fit_adam_no_unique": lambda: fit_sharded("adam", emb_unique=False),
        "fit_replicated_small_table": fit_replicated_small_table,
        "fit_distributed_optimizer": fit_distributed_optimizer,
        "memory_per_rank": memory_per_rank,
        "dense_ids_any_shape": dense_ids_any_shape,
        "ragged_combiners": ragged_combiners,
        "ragged_no_combiner": ragged_no_combiner,
        "sparse_combiners": sparse_combiners,
        "ragged_gradients": ragged_gradients,
        "save_sharded_load_plain": save_sharded_load_plain,
        "save_plain_load_sharded": save_plain_load_sharded,
        "save_keras_file_load_model": save_keras_file_load_model,
        "save_outside_scope": save_outside_scope,
        "save_tf_checkpoint_format": save_tf_checkpoint_format,
        "load_plain_tf_checkpoint": load_plain_tf_checkpoint,
        "legacy_h5_files": legacy_h5_files,
        "get_config_round_trip": get_config_round_trip,
        "bad_combiner": bad_combiner,
        "export_plain_model": export_plain_model,
        "out_of_range_id": out_of_range_id,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok,
            "keras": keras.__name__})
    hb.shutdown()


if __name__ == "__main__":
    main()
