"""Rank script: Horovod's start_timeline / stop_timeline.

    hbrun -np N python timeline_dynamic.py DIR [numpy|tf]

Every rank, after init (the job runs with HB_TIMELINE unset or DYNAMIC):
- 'tl.before' allreduce, not recorded (no timeline yet);
- start_timeline(DIR/first.json, mark_cycles=True); 'tl.first.*';
- start_timeline(DIR/second.json): switches files; 'tl.second';
- stop_timeline(); 'tl.after', not recorded; stop_timeline() again is a
  no-op;
- errors: an empty path (InvalidArgumentError, a ValueError), a path in a
  missing directory (ConfigError on rank 0, nothing on the others).
The test reads the files. With 'tf' the same through hbcore_tf's names and
TF ops (eager). Before init, both calls raise NotInitializedError (a
ValueError, as Horovod's).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Checker, env_rank, expect_raises, report  # noqa: E402

import hbcore as hb  # noqa: E402


def main() -> None:
    out_dir, front = sys.argv[1], sys.argv[2]
    rank = env_rank()
    checker = Checker(rank)
    if front == "tf":
        import hbcore_tf as api  # noqa: E402
        import tensorflow as tf

        def allreduce(name):
            value = api.allreduce(tf.ones([4]), name=name, op=api.Sum)
            return np.asarray(value)
    else:
        api = hb

        def allreduce(name):
            return hb.allreduce(np.ones(4, np.float32), name=name, op=hb.Sum)

    def before_init():
        expect_raises(lambda: api.start_timeline(
            os.path.join(out_dir, "never.json")), ValueError,
            "not been initialized")
        expect_raises(api.stop_timeline, ValueError, "not been initialized")
    checker.run("timeline/before-init", before_init)

    api.init()
    size = api.size()

    def check(value):
        if not np.array_equal(value, np.full(4, size, np.float32)):
            raise AssertionError("allreduce gave %s" % value)

    def record():
        check(allreduce("tl.before"))
        api.start_timeline(os.path.join(out_dir, "first.json"),
                           mark_cycles=True)
        for i in range(3):
            check(allreduce("tl.first.%d" % i))
        api.start_timeline(os.path.join(out_dir, "second.json"))
        check(allreduce("tl.second"))
        api.stop_timeline()
        check(allreduce("tl.after"))
        api.stop_timeline()
    checker.run("timeline/record", record)

    def errors():
        err = expect_raises(lambda: api.start_timeline(""), ValueError,
                            "path is empty")
        if not isinstance(err, hb.InvalidArgumentError):
            raise AssertionError("empty path raised %r" % (err,))
        missing = os.path.join(out_dir, "no-such-dir", "tl.json")
        if rank == 0:
            expect_raises(lambda: api.start_timeline(missing),
                          hb.ConfigError, "cannot open timeline file",
                          missing)
        else:  # only rank 0 writes the timeline
            api.start_timeline(missing)
        check(allreduce("tl.after-errors"))
    checker.run("timeline/errors", errors)
    api.shutdown()
    report({"ok": checker.all_ok}, rank)


if __name__ == "__main__":
    main()
