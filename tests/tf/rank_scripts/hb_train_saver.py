"""hb.train.Saver (hbcore_tf/train/saver.py) at several ranks, run by
tests/tf/test_hb_train_saver.py under hbrun (2 and 3 ranks).

Every rank starts from its own values (rank-seeded, no broadcast) unless
a MonitoredTrainingSession broadcasts, so a checkpoint shows who wrote
it. Expected values come from numpy: the table's rows are split into
contiguous blocks, the first ``B % size`` ranks holding one row more
(np.array_split), and each rank adds its own offset to its rows.
"""
import os
import shutil
import tempfile

import numpy as np

from train_common import (Checker, check, close, expect_raises, rank_values,
                          report, run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402

V1 = tf.compat.v1
CASES = ["dense_save_rank0_writes", "dense_save_in_monitored_session",
         "sharded_save_and_restore", "sharded_save_in_monitored_session",
         "replace_default_saver"]
B, D = 7, 2  # 7 rows: uneven blocks at 2 and 3 ranks
TABLE0 = np.arange(B * D, dtype=np.float32).reshape(B, D) / 4.0
W0 = np.array([0.5, -1.5], np.float32)


def owners(size: int) -> np.ndarray:
    """The rank holding each row (contiguous blocks, larger ones first)."""
    owner = np.zeros(B, np.int64)
    for r, rows in enumerate(np.array_split(np.arange(B), size)):
        owner[rows] = r
    return owner


def table_after(adds: np.ndarray, size: int) -> np.ndarray:
    """TABLE0 after each rank added ``adds[rank]`` to the rows it holds."""
    return TABLE0 + adds[owners(size)][:, None].astype(np.float32)


def sharded_model():
    """A sharded table (TABLE0) and a dense vector (W0), in hb.scope."""
    with hb.embedding_scope():
        emb = V1.get_variable("emb", shape=[B, D],
                              initializer=V1.constant_initializer(TABLE0))
    w = V1.get_variable("w", initializer=tf.constant(W0))
    return emb, w


def bundle_files(directory: str) -> list:
    return sorted(os.listdir(directory))


def main() -> None:
    rank, size = hb.context.rank, hb.context.world_size
    checker = Checker(rank)
    shared = hbcore.broadcast_object(
        tempfile.mkdtemp(prefix="hb_train_saver_") if rank == 0 else None, 0)
    mine = rank_values(11, rank, (3,))
    rank0 = rank_values(11, 0, (3,))

    def dense_save_rank0_writes():
        # Every rank calls save; rank 0 alone writes (each rank's w holds
        # its own values, so the checkpoint must hold rank 0's).
        directory = os.path.join(shared, "dense")
        os.makedirs(directory, exist_ok=True)  # TF saves into a directory
        with tf.Graph().as_default():
            w = V1.get_variable("w", initializer=tf.constant(mine))
            step = V1.train.get_or_create_global_step()
            saver = hb.train.Saver()
            check(saver.saver_def.sharded, "saver_def.sharded is False")
            with V1.Session() as sess:
                sess.run([w.initializer, step.initializer,
                          step.assign(3)])
                path = saver.save(sess, os.path.join(directory, "model.ckpt"),
                                  global_step=step)
                meta = saver.export_meta_graph(
                    os.path.join(shared, "graph_%d.meta" % rank))
        check(path == os.path.join(directory, "model.ckpt-3"),
              "save returned %r" % path)
        hbcore.barrier()  # rank 0's files are complete on every rank
        close(tf.train.load_variable(path, "w"), rank0,
              "w in the checkpoint (rank 0's)", rtol=0, atol=0)
        files = bundle_files(directory)
        check(files == ["checkpoint", "model.ckpt-3.data-00000-of-00001",
                        "model.ckpt-3.index", "model.ckpt-3.meta"],
              "files written: %s" % files)
        check(V1.train.latest_checkpoint(directory) == path,
              "latest checkpoint %s" % V1.train.latest_checkpoint(directory))
        # export_meta_graph: the graph on every rank, the file on rank 0.
        check(meta.saver_def.save_tensor_name ==
              saver.saver_def.save_tensor_name,
              "export_meta_graph returned another graph's saver")
        metas = sorted(f for f in os.listdir(shared) if f.endswith(".meta"))
        check(metas == ["graph_0.meta"], "meta graphs written: %s" % metas)

    def dense_save_in_monitored_session():
        # hb.train.MonitoredTrainingSession saves a graph without sharded
        # tables on rank 0 only: hb.train.Saver's save must not wait for
        # the other ranks there.
        directory = os.path.join(shared, "mts_dense")
        with tf.Graph().as_default():
            w = V1.get_variable("w", initializer=tf.constant(mine))
            step = V1.train.get_or_create_global_step()
            train = V1.train.GradientDescentOptimizer(0.5).minimize(
                tf.reduce_sum(w), global_step=step)
            scaffold = V1.train.Scaffold(saver=hb.train.Saver())
            with hb.train.MonitoredTrainingSession(
                    checkpoint_dir=directory, scaffold=scaffold,
                    save_checkpoint_steps=1, save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                for _ in range(2):
                    sess.run(train)
        hbcore.barrier()
        path = V1.train.latest_checkpoint(directory)
        check(path == os.path.join(directory, "model.ckpt-2"),
              "latest checkpoint %s" % path)
        # Broadcast from rank 0, then two steps of gradient 1, rate 0.5.
        close(tf.train.load_variable(path, "w"), rank0 - 1.0,
              "w in the checkpoint", rtol=1e-6, atol=1e-6)

    def sharded_save_and_restore():
        directory = os.path.join(shared, "sharded")
        os.makedirs(directory, exist_ok=True)
        adds = 100.0 * (1 + np.arange(size))
        expected = table_after(adds, size)
        with tf.Graph().as_default():
            # keep_checkpoint_max and relative paths: hb.scope's Saver
            # defaults, which apply to hb.train.Saver through its base.
            with hb.scope(keep_checkpoint_max=1):
                emb, w = sharded_model()
                saver = hb.train.Saver()
            bump = emb.assign_add(tf.fill(tf.shape(emb), float(adds[rank])))
            with V1.Session() as sess:
                sess.run(V1.global_variables_initializer())
                sess.run(bump)
                prefix = os.path.join(directory, "model.ckpt")
                paths = [saver.save(sess, prefix, global_step=k)
                         for k in (1, 2)]
        path = os.path.join(directory, "model.ckpt-2")
        check(paths[-1] == path, "save returned %r" % paths)
        check(hbcore.allgather_object(paths) == [paths] * size,
              "ranks returned different paths")
        files = bundle_files(directory)
        check(files == ["checkpoint", "model.ckpt-2.data-00000-of-00001",
                        "model.ckpt-2.index", "model.ckpt-2.meta"],
              "files left (max_to_keep 1, no parts): %s" % files)
        with open(os.path.join(directory, "checkpoint")) as f:
            state = f.read()
        check('model_checkpoint_path: "model.ckpt-2"' in state,
              "state file does not record a relative path: %r" % state)
        close(tf.train.load_variable(path, "emb"), expected,
              "the whole table in the checkpoint", rtol=0, atol=0)
        close(tf.train.load_variable(path, "w"), W0, "w in the checkpoint",
              rtol=0, atol=0)
        # Restore: every rank reads its own rows.
        with tf.Graph().as_default():
            with hb.scope():
                emb, w = sharded_model()
            with V1.Session() as sess:
                hb.train.Saver().restore(
                    sess, V1.train.latest_checkpoint(directory))
                rows, w_value = sess.run([emb, w])
        close(rows, expected[owners(size) == rank],
              "restored rows of rank %d" % rank, rtol=0, atol=0)
        close(w_value, W0, "restored w", rtol=0, atol=0)

    def sharded_save_in_monitored_session():
        # The checkpoint hook saves on every rank (collective) through the
        # scaffold's hb.train.Saver; each step adds rank + 1 to the rows
        # of each rank.
        directory = os.path.join(shared, "mts_sharded")
        with tf.Graph().as_default():
            with hb.scope():
                emb, _ = sharded_model()
            step = V1.train.get_or_create_global_step()
            train = tf.group(emb.assign_add(
                tf.fill(tf.shape(emb), float(rank + 1))),
                step.assign_add(1))
            scaffold = V1.train.Scaffold(saver=hb.train.Saver())
            with hb.train.MonitoredTrainingSession(
                    checkpoint_dir=directory, scaffold=scaffold,
                    save_checkpoint_steps=1, save_summaries_steps=None,
                    log_step_count_steps=None) as sess:
                for _ in range(3):
                    sess.run(train)
        hbcore.barrier()
        path = V1.train.latest_checkpoint(directory)
        check(path == os.path.join(directory, "model.ckpt-3"),
              "latest checkpoint %s" % path)
        close(tf.train.load_variable(path, "emb"),
              table_after(3.0 * (1 + np.arange(size)), size),
              "the table after three steps", rtol=0, atol=0)

    def replace_default_saver():
        """An hb.train.Saver lands in SAVERS once; another saver there is
        a ValueError naming its class, two are a ValueError too."""
        get = lambda: V1.get_collection(V1.GraphKeys.SAVERS)  # noqa: E731
        with tf.Graph().as_default():
            V1.get_variable("w", initializer=W0)
            hb.train.replace_default_saver()
            first = get()
            check(len(first) == 1 and type(first[0]) is hb.train.Saver,
                  "an hb.train.Saver in SAVERS: %s" % first)
            hb.train.replace_default_saver()
            check(get() == first, "a second call changes nothing")
            V1.add_to_collection(V1.GraphKeys.SAVERS, V1.train.Saver())
            expect_raises(hb.train.replace_default_saver, ValueError,
                          "multiple items found in collection SAVERS")
        with tf.Graph().as_default():
            V1.get_variable("w", initializer=W0)
            V1.add_to_collection(V1.GraphKeys.SAVERS, V1.train.Saver())
            expect_raises(hb.train.replace_default_saver, ValueError,
                          "holds a tensorflow.python.training.saver.Saver, "
                          "which cannot be changed once built; create it "
                          "as hb.train.Saver(...)")

    table = {
        "dense_save_rank0_writes": dense_save_rank0_writes,
        "dense_save_in_monitored_session": dense_save_in_monitored_session,
        "sharded_save_and_restore": sharded_save_and_restore,
        "sharded_save_in_monitored_session":
            sharded_save_in_monitored_session,
        "replace_default_saver": replace_default_saver,
    }
    run_table(checker, table, CASES)
    hbcore.barrier()
    if rank == 0:
        shutil.rmtree(shared, ignore_errors=True)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
