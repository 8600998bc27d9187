"""tf.compat.v1.train.MonitoredTrainingSession called inside hb.scope is
hb.train.MonitoredTrainingSession, as in HybridBackend (whose scope rewrites
it): variables broadcast from rank 0, checkpoints and chief_only_hooks on
rank 0 only; the plain TF function is back once the last scope closes.
Run by tests/tf/test_hb_scope_mts.py under hbrun (2 and 3 ranks).
"""
import os
import tempfile

from train_common import (Checker, check, close, rank_values, report,
                          run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402

V1 = tf.compat.v1
PLAIN_MTS = V1.train.MonitoredTrainingSession  # before any hb.scope

CASES = ["v1_mts_in_scope", "v1_mts_in_hb_function", "v1_mts_restored"]


class CountingHook(V1.train.SessionRunHook):
    def __init__(self) -> None:
        self.begins = 0

    def begin(self) -> None:
        self.begins += 1


def raw_run(sess, fetches):
    return sess.run_step_fn(
        lambda step_context: step_context.session.run(fetches))


def hooks_of(sess, cls_name: str) -> int:
    return sum(1 for h in sess._hooks if type(h).__name__ == cls_name)


def main() -> None:
    rank = hb.context.rank
    size = hb.context.world_size
    checker = Checker(rank)
    init = [rank_values(7, r, (3, 2)) for r in range(size)]

    def train_in_session(make_session):
        """A variable initialised to this rank's values, one SGD step on
        the sum of the variable; returns (value after creation, value after
        the step, chief hook begins, files in this rank's checkpoint dir,
        broadcast hooks of the session)."""
        ckpt = tempfile.mkdtemp(prefix="hb_scope_mts_%d_" % rank)
        hook = CountingHook()
        with tf.Graph().as_default():
            w = V1.get_variable("w", initializer=tf.constant(init[rank]))
            step = V1.train.get_or_create_global_step()
            train = V1.train.GradientDescentOptimizer(0.5).minimize(
                tf.reduce_sum(w), global_step=step)
            with make_session(ckpt, hook) as sess:
                first = raw_run(sess, w)
                sess.run(train)
                after = raw_run(sess, w)
                broadcasts = hooks_of(sess, "_BroadcastFirstHook")
        files = sorted(os.listdir(ckpt))
        return first, after, hook.begins, files, broadcasts

    def check_distributed(result, label):
        first, after, begins, files, broadcasts = result
        close(first, init[0], "%s: w after session creation (rank 0's)"
              % label, rtol=0, atol=0)
        close(after, init[0] - 0.5, "%s: w after one step" % label,
              rtol=1e-6, atol=1e-6)
        check(broadcasts == 1, "%s: %d broadcast hooks" % (label, broadcasts))
        got = hbcore.allgather_object(begins)
        check(got == [1] + [0] * (size - 1),
              "%s: chief_only_hooks begin() per rank %s" % (label, got))
        has_ckpt = hbcore.allgather_object(
            any(f.startswith("model.ckpt") for f in files))
        check(has_ckpt == [True] + [False] * (size - 1),
              "%s: checkpoint written per rank %s" % (label, has_ckpt))

    def v1_mts_in_scope():
        def session(ckpt, hook):
            # Positional master, is_chief, checkpoint_dir, as TF's.
            return V1.train.MonitoredTrainingSession(
                "", True, ckpt, chief_only_hooks=[hook],
                save_checkpoint_steps=1, save_summaries_steps=None,
                log_step_count_steps=None)

        with hb.scope():
            check(V1.train.MonitoredTrainingSession is not PLAIN_MTS,
                  "MonitoredTrainingSession not rewritten in hb.scope")
            result = train_in_session(session)
        check_distributed(result, "in hb.scope")

        # hb.train's own, called inside the scope: not wrapped twice.
        def hb_session(ckpt, hook):
            return hb.train.MonitoredTrainingSession(
                checkpoint_dir=ckpt, chief_only_hooks=[hook],
                save_checkpoint_steps=1, save_summaries_steps=None,
                log_step_count_steps=None)

        with hb.scope():
            result = train_in_session(hb_session)
        check_distributed(result, "hb.train's in hb.scope")

    def v1_mts_in_hb_function():
        @hb.function(grad_nbuckets=2)
        def run():
            return train_in_session(
                lambda ckpt, hook: V1.train.MonitoredTrainingSession(
                    checkpoint_dir=ckpt, chief_only_hooks=[hook],
                    save_checkpoint_steps=1, save_summaries_steps=None,
                    log_step_count_steps=None))

        check_distributed(run(), "in @hb.function")

    def v1_mts_restored():
        # Nested scopes: the inner exit keeps the rewrite, the outer
        # restores TF's, also when the body raises.
        with hb.scope():
            with hb.scope():
                pass
            check(V1.train.MonitoredTrainingSession is not PLAIN_MTS,
                  "rewrite removed by an inner scope")
        check(V1.train.MonitoredTrainingSession is PLAIN_MTS,
              "MonitoredTrainingSession not restored")
        try:
            with hb.scope():
                raise KeyError("body")
        except KeyError:
            pass
        check(V1.train.MonitoredTrainingSession is PLAIN_MTS,
              "MonitoredTrainingSession not restored after an exception")
        # Outside the scope: TF's own (no broadcast, every rank runs the
        # chief_only_hooks and writes its own checkpoint directory).
        first, _, begins, files, broadcasts = train_in_session(
            lambda ckpt, hook: V1.train.MonitoredTrainingSession(
                checkpoint_dir=ckpt, chief_only_hooks=[hook],
                save_checkpoint_steps=1, save_summaries_steps=None,
                log_step_count_steps=None))
        close(first, init[rank], "w outside the scope (own values)",
              rtol=0, atol=0)
        check(broadcasts == 0 and begins == 1 and
              any(f.startswith("model.ckpt") for f in files),
              "outside the scope: broadcasts %d, begins %d, files %s" % (
                  broadcasts, begins, files))
        hbcore.barrier()

    table = {
        "v1_mts_in_scope": v1_mts_in_scope,
        "v1_mts_in_hb_function": v1_mts_in_hb_function,
        "v1_mts_restored": v1_mts_restored,
    }
    run_table(checker, table, CASES)
    report({"rank": rank, "size": size, "ok": checker.all_ok})
    hb.shutdown()


if __name__ == "__main__":
    main()
