"""Checkpoints, resharding and export of sharded embedding tables
(tf.compat.v1 graphs), run by tests/tf/test_sharded_checkpoint.py under
hbrun at 2 and 3 ranks.

The model: a table of B rows (B not a multiple of the rank count, so the
blocks are uneven) looked up by ids, times a dense [D, 1] kernel, mean
squared error, Adagrad (so the table and the kernel have slots). Expected
values come from plain single-process TensorFlow (no hbcore, no scope)
trained on the whole batch of every step (every rank's batch, rank order),
or from numpy; never from the code under test.

Environment:
    HB_CKPT_OUT: directory (shared) where ``save_collective`` leaves its
        checkpoint for later launches (optional).
    HB_CKPT_IN: a checkpoint prefix written by an earlier launch at
        HB_CKPT_IN_SIZE ranks; without it, the restore cases use the
        checkpoint this launch saved. HB_CKPT_IN_TF2: the same for the
        tf.train.Checkpoint case.
    HB_CKPT_CASES: "rank0_only" runs RANK0_ONLY_CASES instead of CASES;
        "bytes" runs BYTES_CASES (and reports the files' digests).
"""
import glob
import hashlib
import json
import os
import shutil
import tempfile

import numpy as np

from plain_tf import PlainTF, PlainTFError
from train_common import (CaseFailure, Checker, check, close, rank_values,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore_tf.embedding import shard_info  # noqa: E402

CASES = ["save_collective", "restore_any_world_size",
         "restore_into_one_plain_process", "plain_checkpoint_to_sharded",
         "resume_with_monitored_session", "export", "tf2_checkpoint"]
RANK0_ONLY_CASES = ["rank0_only_save_fails"]
BYTES_CASES = ["same_bytes_any_world_size"]
# The bytes case's table: 13 rows (uneven blocks at 2 and 3 ranks), and a
# block size of 3 rows, so that block boundaries fall inside the ranks'
# shards, not on them.
BYTES_ROWS, BYTES_BLOCK_ROWS = 13, 3
B, D, BATCH, STEPS, LR = 11, 3, 4, 3, 0.1
V1 = tf.compat.v1
TABLE0 = (np.arange(B * D, dtype=np.float32).reshape(B, D) - 15.0) / 20.0
W0 = np.array([[0.5], [-0.3], [0.2]], np.float32)
NAMES = ["emb", "emb/Adagrad", "w", "w/Adagrad"]
# Run in the job's plain TensorFlow process (plain_tf.py): restores or
# serves what a launch wrote; a v1 graph in a graph context of its own.
PLAIN_PROCESS = r"""
import json, sys
import numpy as np, tensorflow as tf
V1 = tf.compat.v1
prefix, kind, B, D = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "restore":
    with tf.Graph().as_default():
        emb = V1.get_variable("emb", shape=[B, D])
        w = V1.get_variable("w", shape=[D, 1])
        ids = V1.placeholder(tf.int64, [None])
        V1.train.AdagradOptimizer(0.1).minimize(
            tf.reduce_sum(tf.matmul(tf.nn.embedding_lookup(emb, ids), w)))
        names = ["emb", "emb/Adagrad", "w", "w/Adagrad"]
        values = {v.op.name: v for v in V1.global_variables()}
        with V1.Session() as s:
            V1.train.Saver().restore(s, prefix)
            out = {n: s.run(values[n]).tolist() for n in names}
elif kind == "restore_tf2":
    emb = tf.Variable(tf.zeros([B, D]))
    tf.train.Checkpoint(emb=emb).restore(prefix).expect_partial()
    out = {"emb": emb.numpy().tolist()}
else:
    model = tf.saved_model.load(prefix)
    fn = model.signatures["serving_default"]
    out = {"pred": fn(ids=tf.constant(json.loads(sys.argv[5]), tf.int64))[
        "pred"].numpy().tolist()}
print("RESULT" + json.dumps(out))
"""


def local_batch(step, rank):
    rng = np.random.default_rng([300 + step, rank])
    return (rng.integers(0, B, size=BATCH).astype(np.int64),
            rank_values(400 + step, rank, (BATCH, 1)))


def whole_batch(step, size):
    ids, ys = zip(*[local_batch(step, r) for r in range(size)])
    return np.concatenate(ids), np.concatenate(ys)


def build(sharded, train=True):
    """The model in the default graph; the table sharded or plain; with
    an Adagrad training op unless ``train`` is False (a serving graph)."""
    def model():
        if sharded:
            with hb.embedding_scope():
                emb = V1.get_variable(
                    "emb", shape=[B, D],
                    initializer=V1.constant_initializer(TABLE0))
        else:
            emb = V1.get_variable("emb", initializer=tf.constant(TABLE0))
        w = V1.get_variable("w", initializer=tf.constant(W0))
        ids = V1.placeholder(tf.int64, [None], name="ids")
        pred = tf.matmul(tf.nn.embedding_lookup(emb, ids), w)
        if not train:
            return dict(emb=emb, w=w, ids=ids, pred=pred)
        y = V1.placeholder(tf.float32, [None, 1], name="y")
        loss = tf.reduce_mean(tf.square(pred - y))
        step = V1.train.get_or_create_global_step()
        train_op = V1.train.AdagradOptimizer(LR).minimize(
            loss, global_step=step)
        return dict(emb=emb, w=w, ids=ids, y=y, pred=pred, train=train_op,
                    step=step)
    if sharded:
        with hb.scope():
            return model()
    return model()


def plain_train(schedule):
    """Plain TF on the global batches of ``schedule`` (a list of rank
    counts, one per step: step k's batch is whole_batch(k, n)); returns
    name -> value of NAMES."""
    with tf.Graph().as_default():
        m = build(sharded=False)
        variables = {v.op.name: v for v in V1.global_variables()}
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            for k, n in enumerate(schedule):
                ids, y = whole_batch(k, n)
                sess.run(m["train"], {m["ids"]: ids, m["y"]: y})
            return {n: sess.run(variables[n]) for n in NAMES}


def local_rows(full, info):
    return full[info.offset:info.offset + info.rows]


# The job's plain TensorFlow process (rank 0 uses it; closed by main).
PLAIN = PlainTF()


def run_plain_process(*args):
    """Runs PLAIN_PROCESS in the job's plain TensorFlow process (hbcore
    never imported) and returns its JSON result."""
    try:
        return PLAIN.run(PLAIN_PROCESS, *args)
    except PlainTFError as e:
        raise CaseFailure(str(e)) from e


def main():
    rank, size = hb.context.rank, hb.context.world_size
    checker = Checker(rank)
    state = {}
    shared = hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="hb_shckpt_") if rank == 0 else None, 0)

    def check_local(m, sess, expected, what):
        """This rank's rows of the table and its slot, and the dense
        variables, equal ``expected``."""
        info = shard_info(m["emb"])
        check(info is not None, "emb is not sharded")
        variables = {v.op.name: v for v in V1.global_variables()}
        for n in NAMES:
            got = sess.run(variables[n])
            want = expected[n]
            if n.startswith("emb"):
                want = local_rows(want, info)
            close(got, want, "%s: %s on rank %d" % (what, n, rank),
                  rtol=1e-5, atol=1e-6)

    def save_collective():
        expected = plain_train([size] * STEPS)
        directory = os.path.join(shared, "save")
        with tf.Graph().as_default():
            m = build(sharded=True)
            saver = V1.train.Saver(max_to_keep=1)
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                paths = []
                for k in range(STEPS):
                    ids, y = local_batch(k, rank)
                    sess.run(m["train"], {m["ids"]: ids, m["y"]: y})
                    # Every step saved: max_to_keep must still prune.
                    paths.append(saver.save(
                        sess, os.path.join(directory, "model.ckpt"),
                        global_step=m["step"]))
                state["pred_ids"] = np.arange(B, dtype=np.int64)
                state["pred"] = sess.run(m["pred"],
                                         {m["ids"]: state["pred_ids"]})
        path = paths[-1]
        check(path == os.path.join(directory, "model.ckpt-%d" % STEPS),
              "save returned %s" % path)
        check(hbcore.allgather_object(path) == [path] * size,
              "ranks returned different paths")
        check(V1.train.latest_checkpoint(directory) == path,
              "latest checkpoint %s" % V1.train.latest_checkpoint(directory))
        files = sorted(os.listdir(directory))
        check(not any("hbpart" in f or "hbmerge" in f for f in files) and
              not any(f.startswith("model.ckpt-1.") for f in files),
              "left over or unpruned files: %s" % files)
        shapes = tf.train.load_checkpoint(path).get_variable_to_shape_map()
        check(shapes["emb"] == [B, D] and shapes["emb/Adagrad"] == [B, D],
              "shapes in the checkpoint: %s" % shapes)
        for n in NAMES:
            close(tf.train.load_variable(path, n), expected[n],
                  "checkpoint %s" % n, rtol=1e-5, atol=1e-6)
        state["ckpt"], state["ckpt_size"] = path, size
        close(state["pred"], np.matmul(expected["emb"], expected["w"]),
              "trained predictions", rtol=1e-5, atol=1e-6)
        out = os.environ.get("HB_CKPT_OUT")
        if out and rank == 0:
            for f in glob.glob(path + ".*"):
                shutil.copy(f, out)
        hbcore.barrier()

    def source_checkpoint():
        if os.environ.get("HB_CKPT_IN"):
            return (os.environ["HB_CKPT_IN"],
                    int(os.environ["HB_CKPT_IN_SIZE"]))
        check("ckpt" in state, "save_collective did not run")
        return state["ckpt"], state["ckpt_size"]

    def restore_any_world_size():
        path, written_at = source_checkpoint()
        expected = plain_train([written_at] * STEPS)
        with tf.Graph().as_default():
            m = build(sharded=True)
            with V1.Session() as sess:
                V1.train.Saver().restore(sess, path)
                check_local(m, sess, expected, "restored from N=%d at N=%d" % (
                    written_at, size))
                # The restored table serves lookups of every id.
                got = sess.run(m["pred"], {m["ids"]: np.arange(B)})
        close(got, np.matmul(expected["emb"], expected["w"]),
              "predictions after restore", rtol=1e-5, atol=1e-6)

    def restore_into_one_plain_process():
        path, written_at = source_checkpoint()
        if rank == 0:
            expected = plain_train([written_at] * STEPS)
            got = run_plain_process(path, "restore", B, D)
            check(not got["hbcore_imported"], "hbcore was imported")
            for n in NAMES:
                close(np.array(got[n]), expected[n],
                      "plain restore of %s" % n, rtol=1e-5, atol=1e-6)
        hbcore.barrier()

    def plain_checkpoint_to_sharded():
        expected = plain_train([1] * 2)
        prefix = os.path.join(shared, "plain", "model.ckpt")
        if rank == 0:
            with tf.Graph().as_default():
                m = build(sharded=False)
                with V1.Session() as sess:
                    sess.run(V1.global_variables_initializer())
                    for k in range(2):
                        ids, y = whole_batch(k, 1)
                        sess.run(m["train"], {m["ids"]: ids, m["y"]: y})
                    V1.train.Saver().save(sess, prefix)
        hbcore.barrier()
        with tf.Graph().as_default():
            m = build(sharded=True)
            with V1.Session() as sess:
                V1.train.Saver().restore(sess, prefix)
                check_local(m, sess, expected, "plain checkpoint")

    def resume_with_monitored_session():
        # Resume at this world size from the checkpoint taken after STEPS
        # steps at `written_at` ranks, with MonitoredTrainingSession (every
        # rank restores; the saver hook saves collectively), for STEPS more
        # steps; the uninterrupted reference runs the same global batches.
        path, written_at = source_checkpoint()
        expected = plain_train([written_at] * STEPS + [size] * STEPS)
        directory = os.path.join(shared, "resume")
        if rank == 0:
            os.makedirs(directory)
            for f in glob.glob(path + ".*"):
                shutil.copy(f, directory)
            V1.train.update_checkpoint_state(
                directory, os.path.join(directory, os.path.basename(path)))
        hbcore.barrier()
        with tf.Graph().as_default():
            m = build(sharded=True)
            with hb.train.MonitoredTrainingSession(
                    checkpoint_dir=directory, save_checkpoint_steps=2,
                    save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                for k in range(STEPS, 2 * STEPS):
                    ids, y = local_batch(k, rank)
                    sess.run(m["train"], {m["ids"]: ids, m["y"]: y})
        hbcore.barrier()
        final = V1.train.latest_checkpoint(directory)
        check(final.endswith("-%d" % (2 * STEPS)), "latest %s" % final)
        for n in NAMES:
            close(tf.train.load_variable(final, n), expected[n],
                  "resumed %s" % n, rtol=1e-5, atol=1e-6)
        events = [f for f in os.listdir(directory) if "events" in f]
        check(len(events) <= 1, "event files from several ranks: %s" % events)
        state["resumed"], state["resumed_expected"] = final, expected

    def export():
        check("ckpt" in state, "save_collective did not run")
        base = os.path.join(shared, "export")

        def signature_def_fn():
            with hb.scope():
                # Sharding is off while export builds the serving graph.
                m = build(sharded=True, train=False)
            return V1.saved_model.predict_signature_def(
                inputs={"ids": m["ids"]}, outputs={"pred": m["pred"]})

        exported = hb.train.export(base, state["ckpt"], signature_def_fn)
        check(hbcore.allgather_object(exported) == [exported] * size,
              "ranks returned different export paths")
        check(os.path.dirname(exported) == base, "export path %s" % exported)
        again = hb.saved_model.export(base, os.path.dirname(state["ckpt"]),
                                      signature_def_fn, mode="infer")
        check(again != exported, "a second export overwrote the first")
        if rank == 0:
            ids = [int(i) for i in state["pred_ids"]] + [3, 3, 0]
            got = run_plain_process(exported, "serve", B, D, json.dumps(ids))
            check(not got["hbcore_imported"], "hbcore was imported")
            want = np.concatenate([state["pred"], state["pred"][[3, 3, 0]]])
            close(np.array(got["pred"]), want, "exported predictions",
                  rtol=1e-6, atol=1e-7)
            with open(os.path.join(exported, "saved_model.pb"), "rb") as f:
                check(b"Hbcore" not in f.read(), "an hbcore op was exported")
        hbcore.barrier()

    def tf2_checkpoint():
        # tf.train.Checkpoint (eager): the table is saved collectively as
        # the full tensor, restores here, at other world sizes (the
        # previous launch's checkpoint) and into a plain variable.
        full = rank_values(500, 0, (B, D))
        with hb.scope():
            with hb.embedding_scope():
                emb = V1.get_variable("tf2_emb", shape=[B, D],
                                      initializer=V1.zeros_initializer())
        info = shard_info(emb)
        check(info is not None and tuple(emb.shape) == (info.rows, D),
              "tf2_emb is not sharded: %s" % (emb.shape,))
        emb.assign(local_rows(full, info))
        ckpt = tf.train.Checkpoint(emb=emb, w=tf.Variable(W0))
        path = ckpt.save(os.path.join(shared, "tf2", "ck"))
        check(hbcore.allgather_object(path) == [path] * size,
              "ranks returned different paths")
        close(tf.train.load_variable(path, "emb/.ATTRIBUTES/VARIABLE_VALUE"),
              full, "tf.train.Checkpoint table", rtol=0, atol=0)
        emb.assign(tf.zeros_like(emb))
        ckpt.restore(path).assert_existing_objects_matched()
        close(emb.numpy(), local_rows(full, info), "restored rows",
              rtol=0, atol=0)
        previous = os.environ.get("HB_CKPT_IN_TF2")
        if previous:
            ckpt.restore(previous).assert_existing_objects_matched()
            close(emb.numpy(), local_rows(full, info),
                  "rows restored from another world size", rtol=0, atol=0)
        if rank == 0:
            got = run_plain_process(path, "restore_tf2", B, D)
            close(np.array(got["emb"]), full, "plain tf.train.Checkpoint "
                  "restore", rtol=0, atol=0)
            out = os.environ.get("HB_CKPT_OUT")
            if out:
                for f in glob.glob(path + ".*"):
                    shutil.copy(f, out)
        hbcore.barrier()

    def same_bytes_any_world_size():
        # The same logical state saved at any world size gives the same
        # checkpoint files, byte for byte: tf.compat.v1 Saver (table,
        # Adagrad slot, a dense variable) stored whole and in row blocks,
        # tf.train.Checkpoint, and a Keras .weights.h5 file. The digests are reported and compared
        # across launches at 1, 2 and 3 ranks by the pytest side; here
        # every rank checks that each checkpoint restores its rows.
        from hbcore_tf.embedding import bundle
        from hbcore_tf._base.options import options

        table = (np.arange(BYTES_ROWS * D, dtype=np.float32)
                 .reshape(BYTES_ROWS, D) / 7.0 - 2.0)
        block_bytes = BYTES_BLOCK_ROWS * D * 4
        digests = {}

        def record(name, path):
            data = sorted(glob.glob(path + ".data-*"))
            check([os.path.basename(f) for f in data] ==
                  [os.path.basename(path) + ".data-00000-of-00001"],
                  "%s: data files %s" % (name, data))
            for f in [path + ".index"] + data:
                with open(f, "rb") as handle:
                    digests["%s/%s" % (name, f[len(path):])] = (
                        hashlib.sha256(handle.read()).hexdigest())

        with tf.Graph().as_default():
            with hb.scope():
                with hb.embedding_scope():
                    emb = V1.get_variable(
                        "bytes_emb", shape=[BYTES_ROWS, D],
                        initializer=V1.constant_initializer(table))
                w = V1.get_variable("bytes_w", initializer=tf.constant(W0))
                ids = V1.placeholder(tf.int64, [None])
                V1.train.AdagradOptimizer(LR).minimize(tf.reduce_sum(
                    tf.matmul(tf.nn.embedding_lookup(emb, ids), w)))
            info = shard_info(emb)
            check(info is not None, "bytes_emb is not sharded")
            slot = [v for v in V1.global_variables()
                    if v.op.name == "bytes_emb/Adagrad"]
            saver = V1.train.Saver()
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                whole = saver.save(sess, os.path.join(shared, "whole", "ck"),
                                   write_meta_graph=False, write_state=False)
                with options.scope(emb_checkpoint_block_bytes=block_bytes):
                    blocks = saver.save(
                        sess, os.path.join(shared, "blocks", "ck"),
                        write_meta_graph=False, write_state=False)
                for path in (whole, blocks):
                    sess.run([v.initializer for v in V1.global_variables()
                              if v.op.name != "bytes_w"])
                    sess.run(emb.assign(tf.zeros_like(emb)))
                    saver.restore(sess, path)
                    close(sess.run(emb), local_rows(table, info),
                          "rows restored from %s" % path, rtol=0, atol=0)
                    close(sess.run(slot[0]), np.full(
                        (info.rows, D), 0.1, np.float32),
                        "slot rows restored from %s" % path, rtol=0, atol=0)
        for path in (whole, blocks):
            close(tf.train.load_variable(path, "bytes_emb"), table,
                  "%s: whole table" % path, rtol=0, atol=0)
        entry = bundle.Entry.FromString(
            bundle.read_index(blocks)[b"bytes_emb"])
        starts = [bundle.proto_extents(s_)[0] for s_ in entry.slices]
        check(starts == [(r, min(BYTES_BLOCK_ROWS, BYTES_ROWS - r)) for r in
                         range(0, BYTES_ROWS, BYTES_BLOCK_ROWS)],
              "blocks of bytes_emb: %s" % starts)
        entry = bundle.Entry.FromString(bundle.read_index(whole)[b"bytes_emb"])
        check(not entry.slices, "bytes_emb stored as slices %s" % (
            entry.slices,))
        record("whole", whole)
        record("blocks", blocks)

        with hb.scope():
            with hb.embedding_scope():
                eager_emb = V1.get_variable(
                    "bytes_tf2_emb", shape=[BYTES_ROWS, D],
                    initializer=V1.zeros_initializer())
        eager_emb.assign(local_rows(table, shard_info(eager_emb)))
        ckpt = tf.train.Checkpoint(emb=eager_emb, w=tf.Variable(W0))
        path = ckpt.save(os.path.join(shared, "tf2", "ck"))
        close(tf.train.load_variable(path, "emb/.ATTRIBUTES/VARIABLE_VALUE"),
              table, "tf.train.Checkpoint table", rtol=0, atol=0)
        record("tf2", path)

        # A Keras weights file (rank 0 writes the whole table).
        from hbcore_tf._base import compat as _compat

        keras = _compat.keras_module()
        with hb.scope():
            model = keras.Sequential([
                keras.Input((2,), dtype="int64"),
                hb.keras.layers.ShardedEmbedding(
                    BYTES_ROWS, D, name="bytes_keras_emb",
                    embeddings_initializer=keras.initializers.Constant(table)),
                keras.layers.Flatten(),
                keras.layers.Dense(1, kernel_initializer="ones")])
        keras_path = os.path.join(shared, "keras", "m.weights.h5")
        os.makedirs(os.path.dirname(keras_path), exist_ok=True)
        model.save_weights(keras_path)
        with open(keras_path, "rb") as handle:
            digests["keras/m.weights.h5"] = hashlib.sha256(
                handle.read()).hexdigest()
        state["digests"] = digests
        hbcore.barrier()

    def rank0_only_save_fails():
        # Horovod style: only rank 0 saves. The other ranks wait in a
        # barrier; the stall check reports the table's save and the stall
        # shutdown turns it into an error on every rank.
        with tf.Graph().as_default():
            m = build(sharded=True)
            saver = V1.train.Saver()
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                errors = []
                try:
                    if rank == 0:
                        saver.save(sess, os.path.join(shared, "r0", "m"))
                    hbcore.barrier()
                except Exception as exc:  # noqa: BLE001
                    errors.append("%s: %s" % (type(exc).__name__, exc))
                del m
        check(errors, "a rank-0-only save did not fail on rank %d" % rank)
        report_errors.append(errors[0])

    report_errors = []
    if os.environ.get("HB_CKPT_CASES") == "bytes":
        run_table(checker, {"same_bytes_any_world_size":
                            same_bytes_any_world_size}, BYTES_CASES)
        report({"rank": rank, "size": size, "ok": checker.all_ok,
                "digests": state.get("digests")})
        return
    if os.environ.get("HB_CKPT_CASES") == "rank0_only":
        run_table(checker, {"rank0_only_save_fails": rank0_only_save_fails},
                  RANK0_ONLY_CASES)
        report({"rank": rank, "size": size, "ok": checker.all_ok,
                "errors": report_errors})
        return
    run_table(checker, {
        "save_collective": save_collective,
        "restore_any_world_size": restore_any_world_size,
        "restore_into_one_plain_process": restore_into_one_plain_process,
        "plain_checkpoint_to_sharded": plain_checkpoint_to_sharded,
        "resume_with_monitored_session": resume_with_monitored_session,
        "export": export,
        "tf2_checkpoint": tf2_checkpoint,
    }, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    with PLAIN:
        main()
