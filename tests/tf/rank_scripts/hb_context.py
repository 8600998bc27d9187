"""hb.context, hb.Context and the options object (HybridBackend API).

Launched with HB_GRAD_NBUCKETS=2, HB_DATA_SYNC_DROP_REMAINDER=false,
HB_COMM_DEFAULT=mpi and HB_EMB_WIRE_DTYPE=float16 (ENV below), which the
options must read. The first case uses the context before anything
initialised hbcore. Expected values come from hbcore_tf's Horovod API
(rank(), size(), local_*), TensorFlow's device list and the literals of
the option table's documentation. Run by tests/tf/test_hb_context.py.
"""
import json
import os
import tempfile

import numpy as np

from train_common import (Checker, check, close, expect_raises, report,
                          run_table, tf)

import hbcore  # noqa: E402
import hbcore_tf as hb  # noqa: E402
from hbcore import knobs  # noqa: E402
from hbcore_tf._base.options import Options, option_table  # noqa: E402

ENV = {"HB_GRAD_NBUCKETS": "2", "HB_DATA_SYNC_DROP_REMAINDER": "false",
       "HB_COMM_DEFAULT": "mpi", "HB_EMB_WIRE_DTYPE": "float16"}
CASES = ["no_init", "properties", "devices", "options_env", "options_set",
         "options_scope_nesting", "options_errors", "options_env_bad",
         "no_core_collision", "tf_config", "context_scope_on_class",
         "saving_listeners", "estimator", "options_only_scope",
         "saved_model"]
# The documented defaults (docs/hybridbackend.md), for options ENV leaves.
DEFAULTS = {"comm_pool_capacity": 1, "sharding": False,
            "emb_min_rows_to_shard": 1, "emb_unique": True}
OPTIONS = hb.context.options


def main():
    # Nothing may have initialised hbcore yet: the first case checks that
    # the context does it.
    checker = Checker()
    state = {}

    def no_init():
        check(not hb.is_initialized(), "hbcore initialised before use")
        state["rank"] = hb.context.rank
        check(hb.is_initialized(), "the context did not initialise hbcore")

    def properties():
        ctx = hb.context
        check(ctx() is ctx and hb.Context.get() is ctx, "one instance")
        check(isinstance(ctx, hb.Context), "context is a Context")
        check((ctx.rank, ctx.world_size, ctx.local_rank,
               ctx.local_world_size) ==
              (hb.rank(), hb.size(), hb.local_rank(), hb.local_size()),
              "rank/size/local: %r" % ((ctx.rank, ctx.world_size,
                                        ctx.local_rank,
                                        ctx.local_world_size),))
        check(ctx.is_chief == (hb.rank() == 0), "is_chief")
        check(ctx.task_type == "worker" and ctx.task_id == hb.rank(),
              "task %s %d" % (ctx.task_type, ctx.task_id))
        gpus = tf.config.list_physical_devices("GPU")
        check(ctx.num_gpus == len(gpus) and ctx.has_gpu == bool(gpus),
              "gpus %d %r" % (ctx.num_gpus, ctx.has_gpu))
        want = ("/device:GPU:%d" % (hb.local_rank() % len(gpus)) if gpus
                else "/device:CPU:0")
        check(ctx.current_device() == want and ctx.default_device == want
              and hb.train.device_setter() == want,
              "placement %s" % ctx.current_device())
        check(hb.train.Server().target == "", "Server().target")
        check(hb.train.Server.get() is hb.train.Server.get() and
              hb.train.Server.get().target == "", "Server.get()")

    def devices():
        ctx = hb.context
        rank, size = hb.rank(), hb.size()
        devs = ctx.devices
        check(len(devs) == size, "%d devices" % len(devs))
        kind = "GPU" if ctx.has_gpu else "CPU"
        for r, d in enumerate(devs):
            check(d.startswith("/job:worker/replica:0/task:%d/device:%s:"
                               % (r, kind)), "device %d: %s" % (r, d))
            check(ctx.rank_at(d) == r, "rank_at(%s)" % d)
        gathered = hbcore.allgather_object(devs)
        check(all(g == devs for g in gathered), "devices differ by rank")
        local = ctx.local_devices
        check(len(local) == hb.local_size() and devs[rank] in local,
              "local devices %s" % local)
        if os.environ.get("HB_TEST_HOSTS"):
            # Emulated hosts (emulated_hosts() of tests/support/harness.py):
            # slots per host in rank order.
            hosts, start = [], 0
            for n in map(int, os.environ["HB_TEST_HOSTS"].split(",")):
                hosts.append(list(range(start, start + n)))
                start += n
            mine = [h for h in hosts if rank in h][0]
            check(local == [devs[r] for r in mine],
                  "local devices %s, host ranks %s" % (local, mine))
        check(ctx.cpu_devices == ["/job:worker/replica:0/task:%d/device:CPU:0"
                                  % r for r in range(size)], "cpu devices")
        check(ctx.local_cpu_device == ctx.cpu_devices[rank],
              "local cpu device")
        expect_raises(lambda: ctx.rank_at("/job:ps/task:0"), ValueError,
                      "not a device of this job")
        # An int is a tower (local device) id, as in HybridBackend, whose
        # rank is rank_at(0): one tower per hbcore rank.
        check(ctx.rank_at(0) == rank, "rank_at(0) = %r on rank %d" % (
            ctx.rank_at(0), rank))
        for tower in (1, size, -1):
            expect_raises(lambda t=tower: ctx.rank_at(t), ValueError,
                          "tower %d does not exist" % tower)

    def options_env():
        check(OPTIONS.grad_nbuckets == 2, "HB_GRAD_NBUCKETS=2 -> %r" %
              OPTIONS.grad_nbuckets)
        check(OPTIONS.data_sync_drop_remainder is False,
              "HB_DATA_SYNC_DROP_REMAINDER=false")
        check(OPTIONS.comm_default == "MPI", "HB_COMM_DEFAULT=mpi -> %r" %
              OPTIONS.comm_default)
        check(OPTIONS.emb_wire_dtype == "float16", "HB_EMB_WIRE_DTYPE")
        for name, value in DEFAULTS.items():
            check(getattr(OPTIONS, name) == value and
                  type(getattr(OPTIONS, name)) is type(value),
                  "default %s=%r" % (name, getattr(OPTIONS, name)))

    def options_set():
        try:
            OPTIONS.grad_nbuckets = 5
            check(OPTIONS.grad_nbuckets == 5, "attribute set")
            hb.context.update_params(grad_nbuckets=6, sharding=True)
            check((OPTIONS.grad_nbuckets, OPTIONS.sharding) == (6, True),
                  "update_params")
            check(hb.context.options is OPTIONS, "one options object")

            @hb.function(grad_nbuckets=7)
            def inside():
                return OPTIONS.grad_nbuckets

            check(inside() == 7 and OPTIONS.grad_nbuckets == 6,
                  "hb.function value and unwinding")
        finally:
            OPTIONS.reset()
        check(OPTIONS.grad_nbuckets == 2 and OPTIONS.sharding is False,
              "reset reads the environment again")

    def options_scope_nesting():
        with hb.scope(grad_nbuckets=3):
            check(OPTIONS.grad_nbuckets == 3, "outer scope")
            with hb.context.scope(grad_nbuckets=4, emb_unique=False):
                check((OPTIONS.grad_nbuckets, OPTIONS.emb_unique) ==
                      (4, False), "inner scope")
                try:
                    with hb.scope(sharding=True):
                        check(OPTIONS.grad_nbuckets == 4, "inherited")
                        raise KeyError("leave by an exception")
                except KeyError:
                    pass
                check(OPTIONS.sharding is False, "unwound on exception")
            check((OPTIONS.grad_nbuckets, OPTIONS.emb_unique) == (3, True),
                  "inner unwound")
            OPTIONS.grad_nbuckets = 9  # process-wide; the scope still wins
            check(OPTIONS.grad_nbuckets == 3, "scope over process value")
        check(OPTIONS.grad_nbuckets == 9, "process value after the scope")
        OPTIONS.reset()

    def options_errors():
        for fn in (lambda: OPTIONS.grad_nbucket,
                   lambda: setattr(OPTIONS, "grad_nbucket", 2)):
            exc = expect_raises(fn, AttributeError, "'grad_nbucket'")
            check("grad_nbuckets" in str(exc), "known names listed: %s" % exc)
        for fn in (lambda: hb.context.update_params(grad_nbucket=2),
                   lambda: hb.scope(grad_nbucket=2).__enter__()):
            exc = expect_raises(fn, ValueError, "'grad_nbucket'")
            check("data_sync_drop_remainder" in str(exc), "known names")
        expect_raises(lambda: setattr(OPTIONS, "grad_nbuckets", "2"),
                      TypeError, "grad_nbuckets expects a value of type int")
        expect_raises(lambda: setattr(OPTIONS, "grad_nbuckets", True),
                      TypeError, "type int")
        expect_raises(lambda: hb.scope(sharding=1).__enter__(), TypeError,
                      "sharding expects a value of type bool")
        expect_raises(lambda: hb.context.update_params(comm_default=1),
                      TypeError, "comm_default expects a value of type str")
        expect_raises(lambda: setattr(OPTIONS, "grad_nbuckets", 0),
                      ValueError, "grad_nbuckets must be >= 1")
        expect_raises(lambda: setattr(OPTIONS, "comm_default", "GLOO"),
                      ValueError, "comm_default must be one of MPI, NCCL")
        if hbcore.nccl_built():
            OPTIONS.comm_default = "nccl"
            check(OPTIONS.comm_default == "NCCL", "comm_default=nccl")
            OPTIONS.reset()
        else:
            expect_raises(lambda: setattr(OPTIONS, "comm_default", "NCCL"),
                          ValueError, "no NCCL backend")
        # update_params validates everything before setting anything.
        expect_raises(lambda: hb.context.update_params(
            grad_nbuckets=8, sharding="yes"), TypeError, "sharding")
        check(OPTIONS.grad_nbuckets == 2, "partial update_params")
        check(OPTIONS.as_dict()["grad_nbuckets"] == 2, "as_dict")

    def options_env_bad():
        bad = [("HB_GRAD_NBUCKETS", "two", "int"),
               ("HB_SHARDING", "maybe", "bool"),
               ("HB_COMM_DEFAULT", "gloo", "MPI, NCCL"),
               ("HB_GRAD_NBUCKETS", "0", ">= 1")]
        for var, text, fragment in bad:
            # The environment is parsed at the first read of any option.
            opts = Options(environ={var: text})
            exc = expect_raises(lambda o=opts: o.grad_nbuckets, ValueError,
                                var)
            check(fragment in str(exc), "%s=%s: %s" % (var, text, exc))
        for text, value in (("1", True), ("0", False), ("TRUE", True),
                            ("false", False), (" yes ", True)):
            got = Options(environ={"HB_SHARDING": text}).sharding
            check(got is value, "HB_SHARDING=%r -> %r" % (text, got))
        check(Options(environ={"HB_GRAD_NBUCKETS": ""}).grad_nbuckets == 1,
              "empty variable means the default")

    def no_core_collision():
        core = {k.env for k in knobs.KNOBS}
        ours = {o.env for o in option_table()}
        check(not core & ours, "shared variables %s" % (core & ours))
        check(all(o.env == "HB_" + o.name.upper() for o in option_table()),
              "env names")

    def tf_config():
        saved = os.environ.pop("TF_CONFIG", None)
        try:
            check(hb.context.get_tf_config() is None, "unset TF_CONFIG")
            # HybridBackend's layout: the first host is the chief, with an
            # evaluator the second host is it, the rest are workers; a
            # "worker" task_id is the index of its host.
            hosts = ["a:1", "b:2", "c:3", "d:4"]
            layouts = [
                (("worker", 0, hosts, ["p:9"], True),
                 {"chief": ["a:1"], "evaluator": ["b:2"],
                  "worker": ["c:3", "d:4"], "ps": ["p:9"]},
                 ("chief", 0)),
                (("worker", 1, hosts, None, True), None, ("evaluator", 0)),
                (("worker", 3, hosts, None, True), None, ("worker", 1)),
                (("worker", 2, hosts, None, False),
                 {"chief": ["a:1"], "worker": ["b:2", "c:3", "d:4"]},
                 ("worker", 1)),
                (("worker", 0, ["a:1"], None, True), {"chief": ["a:1"]},
                 ("chief", 0)),
                (("ps", 1, hosts[:2], ["p:9", "q:8"], False),
                 {"chief": ["a:1"], "worker": ["b:2"],
                  "ps": ["p:9", "q:8"]}, ("ps", 1)),
            ]
            for args, cluster, (task_type, task_id) in layouts:
                written = hb.context.set_tf_config(*args)
                parsed = json.loads(os.environ["TF_CONFIG"])
                check(parsed == written, "returned %r, wrote %r" % (
                    written, parsed))
                if cluster is not None:
                    check(parsed["cluster"] == cluster, "%r: cluster %r" % (
                        args, parsed["cluster"]))
                check(parsed["task"] == {"type": task_type,
                                         "index": task_id},
                      "%r: task %r" % (args, parsed["task"]))
                got = hb.Context.get_tf_config()
                check(type(got).__name__ == "TfConfig" and
                      (got.task_type, got.task_id, got.cluster) ==
                      (task_type, task_id, parsed["cluster"]),
                      "get_tf_config %r" % (got,))
            expect_raises(lambda: hb.context.set_tf_config("worker", 0, []),
                          ValueError, "worker_hosts")
            expect_raises(lambda: hb.context.set_tf_config("boss", 0, ["a"]),
                          ValueError, "task_type")
            os.environ["TF_CONFIG"] = "{not json"
            expect_raises(hb.context.get_tf_config, ValueError, "TF_CONFIG")
            os.environ["TF_CONFIG"] = '{"cluster": {}}'
            expect_raises(hb.context.get_tf_config, ValueError, "task.type")
        finally:
            os.environ.pop("TF_CONFIG", None)
            if saved is not None:
                os.environ["TF_CONFIG"] = saved

    def context_scope_on_class():
        # HybridBackend's Context.scope and current_device are
        # classmethods.
        with hb.Context.scope(grad_nbuckets=3) as ctx:
            check(OPTIONS.grad_nbuckets == 3, "hb.Context.scope value")
            check(ctx is hb.context, "hb.Context.scope yields %r" % (ctx,))
        check(OPTIONS.grad_nbuckets == 2, "hb.Context.scope unwound")
        check(hb.Context.current_device() == hb.context.current_device(),
              "hb.Context.current_device() %r" % (
                  hb.Context.current_device(),))

    def saving_listeners():
        first = tf.compat.v1.train.CheckpointSaverListener()
        second = tf.compat.v1.train.CheckpointSaverListener()
        hb.context.add_saving_listener("a", first)
        hb.context.add_saving_listener("a", second)
        check(hb.context.saving_listeners.count(second) == 1 and
              first not in hb.context.saving_listeners, "replace by name")
        expect_raises(lambda: hb.context.add_saving_listener("b", object()),
                      TypeError, "CheckpointSaverListener")

    def estimator():
        """hb.estimator holds ModeKeys (tf.estimator's strings, usable in
        hb.scope); every other name raises ImportError with the message."""
        keys = hb.estimator.ModeKeys
        check((keys.TRAIN, keys.EVAL, keys.PREDICT) == ("train", "eval",
                                                        "infer"),
              "ModeKeys %r" % ((keys.TRAIN, keys.EVAL, keys.PREDICT),))
        with hb.scope(mode=hb.estimator.ModeKeys.TRAIN):
            check(hb.context.options.mode == "train", "scope(mode=TRAIN)")
        check(hb.context.options.mode is None, "mode after the scope")
        check(not hasattr(hb.estimator, "__wrapped__"),
              "dunder probes are AttributeError")

        def import_estimator():
            from hbcore_tf.estimator import Estimator  # noqa: F401

        for what, fn in (
                ("Estimator", lambda: hb.estimator.Estimator),
                ("RunConfig", lambda: hb.estimator.RunConfig()),
                ("EstimatorSpec", lambda: hb.estimator.EstimatorSpec),
                ("train_and_evaluate",
                 lambda: hb.estimator.train_and_evaluate),
                ("Estimator", import_estimator)):
            exc = expect_raises(fn, ImportError, "hb.estimator.%s: "
                                "hb.estimator is not available: tf.estimator "
                                "was removed in TensorFlow 2.16" % what)
            for fragment in ("hb.scope", "MonitoredTrainingSession", "Keras"):
                check(fragment in str(exc), "message lacks %s" % fragment)

    def options_only_scope():
        """hb.context_scope: options for the code inside, no patches."""
        before = OPTIONS.grad_nbuckets
        with hb.context_scope(grad_nbuckets=before + 5) as ctx:
            check(ctx is hb.context, "yields hb.context")
            check(OPTIONS.grad_nbuckets == before + 5, "option inside")
            with tf.Graph().as_default():
                opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)
            check(type(opt) is tf.compat.v1.train.GradientDescentOptimizer,
                  "an optimizer created inside stays TF's: %r" % type(opt))
        check(OPTIONS.grad_nbuckets == before, "unwound")
        expect_raises(lambda: hb.context_scope(grad_nbucket=2).__enter__(),
                      ValueError, "'grad_nbucket'")

    def saved_model():
        path = hbcore.broadcast_object(
            os.path.join(tempfile.mkdtemp(prefix="hb_sm_"), "model")
            if hb.rank() == 0 else None, 0)
        module = tf.Module()
        module.v = tf.Variable(np.arange(3, dtype=np.float32) + 1.0)
        module.f = tf.function(lambda x: x * module.v,
                               input_signature=[tf.TensorSpec([3])])
        written = hb.saved_model.export(path, module)
        check(written == (path if hb.rank() == 0 else None),
              "export returned %r" % written)
        loaded = tf.saved_model.load(path)
        close(loaded.f(tf.ones([3])), [1.0, 2.0, 3.0], "loaded model")
        hbcore.barrier()

    table = {name: fn for name, fn in (
        ("no_init", no_init), ("properties", properties),
        ("devices", devices), ("options_env", options_env),
        ("options_set", options_set),
        ("options_scope_nesting", options_scope_nesting),
        ("options_errors", options_errors),
        ("options_env_bad", options_env_bad),
        ("no_core_collision", no_core_collision), ("tf_config", tf_config),
        ("context_scope_on_class", context_scope_on_class),
        ("saving_listeners", saving_listeners), ("estimator", estimator),
        ("options_only_scope", options_only_scope),
        ("saved_model", saved_model))}
    run_table(checker, table, CASES)
    report({"rank": hb.rank(), "size": hb.size(), "ok": checker.all_ok,
            "initial_rank": state.get("rank")})
    hb.shutdown()


if __name__ == "__main__":
    main()
