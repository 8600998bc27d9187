"""A checkpoint save that fails on one rank only, run by
tests/tf/test_failed_save.py under hbrun.

    hbrun -np N python failed_save.py VARIANT FAILING_RANK [after]

Every rank saves to the same relative prefix ``ckpt/model.ckpt`` from a
working directory of its own (as on hosts without a shared filesystem);
on the failing rank ``ckpt`` is a regular file, so its write fails (for
root as well). What the job must do: end promptly, every rank that reports
naming what went wrong.

VARIANT:
  plain_sharded  hb.train.Saver in a plain session, the graph holds a
                 sharded table: the save is collective, every rank must
                 raise ShardedSaveError naming the failing rank's error;
  plain_dense    hb.train.Saver in a plain session, dense graph (rank 0
                 alone writes): the failing rank raises (only rank 0 can
                 fail: the others write nothing);
  mts_sharded    hb.train.MonitoredTrainingSession with a sharded table
                 whose checkpoint hook saves at the end (collective);
  mts_dense      the same with a dense graph (rank 0 saves alone);
  tf_mts_dense   mts_dense in TF's own MonitoredTrainingSession with
                 hb.BroadcastGlobalVariablesHook (Horovod's way);
  mts_sharded_end, mts_dense_end
                 the same, saving to one directory shared by every rank,
                 good at the start and replaced by a file by the failing
                 rank before the session ends: the save at the end fails;
  mts_dense_steps
                 the same with a dense graph, an allreduce in every step
                 and a save after every step; the failing rank breaks
                 the directory before its first step (rank 0: its save
                 after that step fails while the others run the next).
  tf_mts_nohook_steps
                 mts_dense_steps in TF's own MonitoredTrainingSession
                 without a broadcast hook: the step's allreduce after the
                 shutdown fails with UnknownError, which TF does not take
                 for a preemption (an AbortedError made the session start
                 over in a loop).

after:
  raise   (default) the save's exception propagates: the rank exits 1;
  barrier the save's exception is caught and reported, then every rank
          calls hbcore.barrier() and then one allreduce (what a test
          harness catching the failure and going on to its next case
          does); each outcome is reported.

Each rank reports {"save": outcome, "after": [outcomes]} where an outcome
is "ok" or exc_info(exc); with ``raise`` the report is written before the
exception propagates.
"""
import faulthandler
import os
import shutil
import sys

import numpy as np

from train_common import report, tf
from common import env_rank, exc_info

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402

V1 = tf.compat.v1
B, D = 5, 2

# Where each process sits, should the job outlive its test's timeout.
faulthandler.dump_traceback_later(
    float(os.environ.get("HB_TEST_DUMP_AFTER_S", "90")), exit=False)


def sharded_model():
    with hb.embedding_scope():
        emb = V1.get_variable(
            "emb", shape=[B, D],
            initializer=V1.constant_initializer(
                np.arange(B * D, dtype=np.float32).reshape(B, D)))
    return emb


def make_bad(directory: str) -> None:
    """Puts a regular file where ``directory`` is (failing rank only)."""
    if env_rank() != FAILING[0]:
        return
    shutil.rmtree(directory, ignore_errors=True)
    with open(directory, "w") as f:
        f.write("a file where the checkpoint directory should be\n")


FAILING = [-1]


def save_dir(out: str, rank: int, failing: int, at_end: bool) -> str:
    """The checkpoint directory, relative to this rank's own working
    directory ``out`` (as on hosts without a shared filesystem): every
    rank names the same prefix; on the failing rank that directory is a
    regular file, which no process (root included) can write below."""
    os.chdir(out)
    if at_end:
        # A directory of the job's (shared by every rank), good until the
        # failing rank replaces it with a file (make_bad).
        directory = os.path.join(os.environ["HB_TEST_OUT"], "shared_ckpt")
        os.makedirs(directory, exist_ok=True)
        return directory
    os.makedirs("ckpt", exist_ok=True)
    make_bad("ckpt")
    return "ckpt"


def plain(directory: str, sharded: bool) -> None:
    with tf.Graph().as_default():
        if sharded:
            with hb.scope():
                sharded_model()
        V1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        saver = hb.train.Saver()
        with V1.Session() as sess:
            sess.run(V1.global_variables_initializer())
            saver.save(sess, os.path.join(directory, "model.ckpt"),
                       global_step=1)


def monitored(directory: str, sharded: bool, break_at_end: bool = False,
              every_step: bool = False, plain_tf: bool = False,
              broadcast: bool = True) -> None:
    with tf.Graph().as_default():
        if sharded:
            with hb.scope():
                emb = sharded_model()
            bump = emb.assign_add(tf.ones_like(emb))
        else:
            w = V1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
            # A collective in every step.
            bump = w.assign_add(hb.allreduce(tf.ones_like(w), name="step"))
        step = V1.train.get_or_create_global_step()
        train = tf.group(bump, step.assign_add(1))
        scaffold = V1.train.Scaffold(saver=hb.train.Saver())
        # A large step interval: the hook saves at the start (after the
        # session is created) and at the end; or after every step.
        if plain_tf:
            # Horovod's way: TF's session, rank 0 checkpoints, the hook
            # broadcasts.
            session = V1.train.MonitoredTrainingSession(
                checkpoint_dir=directory if hb.context.rank == 0 else None,
                scaffold=scaffold,
                save_checkpoint_steps=1 if every_step else 1000,
                hooks=[hb.BroadcastGlobalVariablesHook(0)] if broadcast
                else [],
                save_summaries_steps=None, save_summaries_secs=None,
                log_step_count_steps=None)
        else:
            session = hb.train.MonitoredTrainingSession(
                checkpoint_dir=directory, scaffold=scaffold,
                save_checkpoint_steps=1 if every_step else 1000,
                save_summaries_steps=None, save_summaries_secs=None,
                log_step_count_steps=None)
        with session as sess:
            for _ in range(3):
                if every_step:
                    make_bad(directory)  # the next step's save fails
                sess.run(train)
            if break_at_end:
                # The directory goes bad during training on the failing
                # rank (save_dir made it good): the save at the end fails.
                make_bad(directory)


def main() -> None:
    variant, failing = sys.argv[1], int(sys.argv[2])
    after = sys.argv[3] if len(sys.argv) > 3 else "raise"
    rank = hb.context.rank  # initializes hbcore
    out = os.path.join(os.environ["HB_TEST_OUT"], "rank%d" % rank)
    os.makedirs(out, exist_ok=True)
    FAILING[0] = failing
    directory = save_dir(out, rank, failing,
                         variant.endswith(("_end", "_steps")))
    hbcore.allreduce(np.ones(1), name="warmup")
    result = {"rank": rank, "save": "ok", "after": []}
    run = {"plain_sharded": lambda: plain(directory, True),
           "plain_dense": lambda: plain(directory, False),
           "mts_sharded": lambda: monitored(directory, True),
           "mts_dense": lambda: monitored(directory, False),
           "tf_mts_dense": lambda: monitored(directory, False,
                                             plain_tf=True),
           "mts_sharded_end": lambda: monitored(directory, True, True),
           "mts_dense_end": lambda: monitored(directory, False, True),
           "mts_dense_steps": lambda: monitored(directory, False,
                                               every_step=True),
           "tf_mts_nohook_steps": lambda: monitored(
               directory, False, every_step=True, plain_tf=True,
               broadcast=False)}[variant]
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - reported, then as asked
        result["save"] = exc_info(exc)
        report(result, rank)
        print("rank %d: save failed: %s: %s" % (rank, type(exc).__name__,
                                                exc), file=sys.stderr)
        if after == "raise":
            raise
    report(result, rank)
    if after == "barrier":
        for label, call in (
                ("barrier", lambda: hbcore.barrier()),
                ("allreduce", lambda: hbcore.allreduce(
                    np.ones(2), name="after_save"))):
            try:
                call()
                result["after"].append({"op": label, "outcome": "ok"})
            except Exception as exc:  # noqa: BLE001
                result["after"].append({"op": label,
                                        "outcome": exc_info(exc)})
            report(result, rank)
    faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
