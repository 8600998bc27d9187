"""Rank script: integer "training" under hbrun's elastic driver.

Step s adds the allreduce-Sum of (rank + 1) * (s + 1) to ``state.total``
(exact in int64, so a replay with the world sizes is exact), and adds
(i + 1) * (s + 1) * size to row i of a ROWS x 2 table sharded by rows
over the ranks (a RowShardedState: each rank changes only its own rows,
so the table survives a lost host only through the commit's second
copies, and is resharded at each new world size); state is committed
after every odd step.  Every rank appends ``generation size
step`` to $HB_TEST_OUT/steps.log after each step, so the test can replay
each step with the size of the last world that ran it.

Events (HB_TEST_EVENTS, comma separated, each done once per job: a marker
file in $HB_TEST_OUT records it):
    kill:HOST:STEP   the rank on emulated host HOST SIGKILLs itself before
                     step STEP's allreduce
    killhost:HOST:STEP  the first rank on HOST there loses the whole host:
                     it SIGKILLs every rank of HOST (itself last) and
                     removes HOST's store directory (its shared memory)
    exit0:HOST:STEP  that rank exits 0 there (a worker that ends early)
    stop:HOST:STEP   that rank SIGSTOPs itself there (a rank that hangs
                     without dying; its wrapper must kill it)
    hang:HOST:STEP   that rank blocks there forever in its own code, its
                     process running (the stall shutdown must end it)
    killhosting:HOST:STEP  (a hosted rank: hbcore.spark, hbcore.ray) the
                     rank on HOST SIGKILLs the process that hosts it (the
                     Spark task's Python worker, the Ray actor) there and
                     waits until the job stops it
    killwrite:HOST:STEP  the rank on HOST SIGKILLs itself in the middle of
                     the commit after step STEP: half of its first store
                     file of that commit written (a .tmp file left), the
                     rest of the commit not
    add:HOST:STEP    in a world without HOST, rank 0 adds HOST:1 to
                     $HB_TEST_HOSTS_FILE after step STEP, and every rank
                     commits and waits until the driver's host change
                     interrupts the world
    remove:HOST:STEP the same in a world with HOST, removing it
The final world's ranks report {total, table: the whole table gathered,
size, generation, resets: the world size seen by each reset callback call
in this process}.

The first argument picks the trainer (default numpy).  With ``keras``
the state is an hbcore_tf TensorFlowKerasState instead:
a Keras Dense(4 -> 1) layer without bias trained by SGD(1, momentum=0.5)
on the loss sum(model(x)), x filled with (rank + 1) * (s + 1), through
DistributedGradientTape(op=Sum): every value stays a small dyadic
fraction, exact in float32, so the test replays it exactly as well.
The ranks then also report the kernel ("kernel") and the momentum.
``v1`` trains the same model as a tf.compat.v1 graph in a
TensorFlowState(session=...), ``fit`` by model.fit with KerasState and
the three callbacks (the classes say how).
"""
import json
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import OUT_DIR, report  # noqa: E402

import hbcore as hvd  # noqa: E402
from hbcore.launcher.rank.elastic_protocol import (host_of_rank,  # noqa: E402
                                                   parse_hosts_var)

STEPS = 10
ROWS = 7


def once(event: str) -> bool:
    """True the first time any rank of the job reaches ``event``."""
    try:
        fd = os.open(os.path.join(OUT_DIR, "done." + event.replace(":", "_")),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def names(hosts_var: str) -> list:
    """The host names of HB_ELASTIC_HOSTS."""
    return [name for name, _ in parse_hosts_var(hosts_var)]


def change_hosts(kind: str, host: str) -> None:
    """Adds ``host:1`` to, or removes ``host`` from, the hosts file that
    the test's discovery script prints."""
    path = os.environ["HB_TEST_HOSTS_FILE"]
    with open(path) as f:
        lines = [line for line in f if line.split(":")[0] != host]
    if kind == "add":
        lines.append("%s:1\n" % host)
    with open(path + ".tmp", "w") as f:
        f.writelines(lines)
    os.replace(path + ".tmp", path)  # the driver never reads half a file


def pid_path(rank: int) -> str:
    return os.path.join(OUT_DIR, "pid.%s.%d" % (
        os.environ["HB_ELASTIC_GENERATION"], rank))


def lose_host(host: str) -> None:
    """The killhost event: every rank of ``host`` in this generation is
    SIGKILLed (this one last, once the others are dead) and the host's
    store directory removed, as if the machine went away."""
    hosts = parse_hosts_var(os.environ["HB_ELASTIC_HOSTS"])
    for rank in range(hvd.size()):
        if rank == hvd.rank() or host_of_rank(hosts, rank)[0] != host:
            continue
        with open(pid_path(rank)) as f:
            peer = psutil.Process(int(f.read()))
        peer.kill()
        # Dead (or a zombie its wrapper has not reaped yet) before the
        # directory goes: it must not write there again.
        while peer.is_running() and peer.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
    shutil.rmtree(os.path.join(os.environ["HB_ELASTIC_STORE"], host))
    os.kill(os.getpid(), signal.SIGKILL)


class NumpyTrainer:
    """The integer sum and the sharded table of the module comment, in a
    RowShardedState."""

    def __init__(self) -> None:
        self.state = hvd.elastic.RowShardedState(
            {"table": np.zeros((ROWS, 2), np.int64)}, step=0, total=0)

    def step(self, s: int) -> None:
        got = hvd.allreduce(np.array([(hvd.rank() + 1) * (s + 1)],
                                     np.int64), op=hvd.Sum, name="step")
        self.state.total += int(got[0])
        block = self.state.shards["table"]
        first = hvd.allgather(np.array([len(block)]), name="rows")[
            :hvd.rank()].sum()
        ids = np.arange(first, first + len(block))
        block += ((ids + 1) * (s + 1) * hvd.size())[:, None]

    def result(self) -> dict:
        table = hvd.allgather(self.state.shards["table"], name="table")
        return {"total": self.state.total, "table": table.tolist()}


class KerasTrainer:
    """The Keras model of the module comment, in a TensorFlowKerasState."""

    def __init__(self) -> None:
        # Imported here: the numpy runs must not load TensorFlow.
        import tensorflow as tf
        import hbcore_tf
        from hbcore_tf._base import compat as _compat
        keras = _compat.keras_module()
        self.tf, self.hvd_tf, self.keras = tf, hbcore_tf, keras
        self.model = keras.Sequential([
            keras.Input((4,)),
            keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
        self.opt = keras.optimizers.SGD(1.0, momentum=0.5)
        self.state = hbcore_tf.elastic.TensorFlowKerasState(
            self.model, self.opt, step=0)

    def step(self, s: int) -> None:
        tf = self.tf
        x = tf.fill((1, 4), float((hvd.rank() + 1) * (s + 1)))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(self.model(x))
        tape = self.hvd_tf.DistributedGradientTape(tape, op=self.hvd_tf.Sum)
        variables = self.model.trainable_variables
        grads = tape.gradient(loss, variables)
        self.opt.apply_gradients(zip(grads, variables))

    def result(self) -> dict:
        kernel = self.model.get_weights()[0]
        momentum = [np.array(v.numpy()) for v in self.opt.variables
                    if np.shape(v.numpy()) == kernel.shape][-1]
        return {"kernel": kernel.ravel().tolist(),
                "momentum": momentum.ravel().tolist()}


class V1Trainer:
    """The model of KerasTrainer as a tf.compat.v1 graph: a (4, 1)
    variable under MomentumOptimizer(1, 0.5) (accumulator = minus Keras's
    momentum), with hbcore_tf's DistributedOptimizer(op=Sum), in a
    TensorFlowState(session=...)."""

    def __init__(self) -> None:
        import tensorflow as tf
        import hbcore_tf
        tf1 = tf.compat.v1
        tf1.disable_eager_execution()
        self.x = tf1.placeholder(tf.float32, (1, 4))
        self.w = tf1.get_variable("w", (4, 1), tf.float32,
                                  tf1.zeros_initializer())
        opt = hbcore_tf.DistributedOptimizer(
            tf1.train.MomentumOptimizer(1.0, 0.5), op=hbcore_tf.Sum)
        self.train_op = opt.minimize(tf.reduce_sum(tf.matmul(self.x,
                                                             self.w)))
        self.accum = [v for v in tf1.global_variables()
                      if "Momentum" in v.name][0]
        self.sess = tf1.Session()
        self.sess.run(tf1.global_variables_initializer())
        self.state = hbcore_tf.elastic.TensorFlowState(session=self.sess,
                                                       step=0)

    def step(self, s: int) -> None:
        self.sess.run(self.train_op, {self.x: np.full(
            (1, 4), (hvd.rank() + 1) * (s + 1), np.float32)})

    def result(self) -> dict:
        kernel, accum = self.sess.run([self.w, self.accum])
        return {"kernel": kernel.ravel().tolist(),
                "momentum": (-accum).ravel().tolist()}


class WholeDumps:
    """After every commit, and once after the restore of a later
    generation, the ranks gather the whole tables, dense variables and
    slots (``whole()``); rank 0 writes them to ``commit.<generation>.json``
    / ``restored.<generation>.json``."""

    def dump(self, name: str) -> None:
        values = self.whole()
        if hvd.rank() == 0:
            with open(os.path.join(OUT_DIR, name + ".tmp"), "w") as f:
                json.dump(values, f)
            os.replace(os.path.join(OUT_DIR, name + ".tmp"),
                       os.path.join(OUT_DIR, name))

    def after_commit(self) -> None:
        self.dump("commit.%s.json" % os.environ["HB_ELASTIC_GENERATION"])

    def result(self) -> dict:
        return self.whole()


class ShardedKerasTrainer(WholeDumps):
    """Keras in hb.scope: ShardedEmbedding(ROWS, 2) of two ids, flattened,
    into Dense(1), Adagrad, trained by train_on_batch, in a
    TensorFlowKerasState that is not told which variables are sharded."""

    def __init__(self) -> None:
        import tensorflow as tf
        import hbcore_tf as hb
        from hbcore_tf._base import compat as _compat
        from hbcore_tf._base.rank_local import is_rank_local
        keras = _compat.keras_module()
        self.tf, self.hb, self.is_rank_local = tf, hb, is_rank_local
        table = (np.arange(ROWS * 2, dtype=np.float32).reshape(ROWS, 2)
                 - 6.0) / 8.0
        with hb.scope():
            ids = keras.Input((2,), dtype="int64")
            emb = hb.keras.layers.ShardedEmbedding(
                ROWS, 2, embeddings_initializer=keras.initializers.Constant(
                    table), name="emb")
            out = keras.layers.Dense(
                1, kernel_initializer=keras.initializers.Constant(
                    [[0.5], [-0.25], [0.25], [0.5]]))(
                        keras.layers.Flatten()(emb(ids)))
            self.model = keras.Model(ids, out)
            self.opt = keras.optimizers.Adagrad(0.5)
            self.model.compile(optimizer=self.opt, loss="mse")
        self.state = hb.elastic.TensorFlowKerasState(self.model, self.opt,
                                                     step=0)

    def step(self, s: int) -> None:
        r = hvd.rank()
        with self.hb.scope():
            self.model.train_on_batch(
                np.array([[(s + r) % ROWS, (2 * s + r + 3) % ROWS]]),
                np.array([[1.0]], np.float32))

    def whole(self) -> dict:
        # Collective: every rank gathers the same variables in one order.
        from hbcore_tf.elastic import _optimizer_variables
        variables = list(self.model.weights) + _optimizer_variables(self.opt)
        return {"%d" % i: (self.hb.allgather(
            self.tf.convert_to_tensor(v), name="whole%d" % i)
            if self.is_rank_local(v) else self.tf.convert_to_tensor(v)
        ).numpy().tolist() for i, v in enumerate(variables)
            if len(v.shape)}


class ShardedV1Trainer(WholeDumps):
    """A tf.compat.v1 graph inside hb.scope: a ROWS x 2 embedding table
    (sharded by hb.embedding_scope) times a dense (2, 1) kernel, mean
    squared error, Adagrad (slots for both), in a TensorFlowState that
    is not told which variables are sharded (WholeDumps for the
    checks)."""

    NAMES = ["emb", "emb/Adagrad", "w", "w/Adagrad"]

    def __init__(self) -> None:
        import tensorflow as tf
        import hbcore_tf as hb
        from hbcore_tf._base.rank_local import is_rank_local
        tf1 = tf.compat.v1
        tf1.disable_eager_execution()
        table = (np.arange(ROWS * 2, dtype=np.float32).reshape(ROWS, 2)
                 - 6.0) / 8.0
        with hb.scope():
            with hb.embedding_scope():
                emb = tf1.get_variable(
                    "emb", shape=[ROWS, 2],
                    initializer=tf1.constant_initializer(table))
            w = tf1.get_variable("w", initializer=tf.constant(
                [[0.5], [-0.25]]))
            self.ids = tf1.placeholder(tf.int64, [None])
            self.y = tf1.placeholder(tf.float32, [None, 1])
            pred = tf.matmul(tf.nn.embedding_lookup(emb, self.ids), w)
            self.train_op = tf1.train.AdagradOptimizer(0.5).minimize(
                tf.reduce_mean(tf.square(pred - self.y)))
        by_name = {v.op.name: v for v in tf1.global_variables()}
        # The whole values: blocks of rows in rank order are id order.
        self.gathered = [
            hb.allgather(tf.convert_to_tensor(by_name[n]), name="whole_" + n)
            if is_rank_local(by_name[n]) else tf.convert_to_tensor(by_name[n])
            for n in self.NAMES]
        self.sess = tf1.Session()
        self.sess.run(tf1.global_variables_initializer())
        self.state = hb.elastic.TensorFlowState(session=self.sess, step=0)

    def step(self, s: int) -> None:
        r = hvd.rank()
        self.sess.run(self.train_op, {
            self.ids: [(s + r) % ROWS, (2 * s + r + 3) % ROWS],
            self.y: [[1.0], [-1.0]]})

    def whole(self) -> dict:
        # Collective: every rank runs the same gathers.
        return {n: value.tolist() for n, value in
                zip(self.NAMES, self.sess.run(self.gathered))}


class FitTrainer(KerasTrainer):
    """KerasTrainer's model trained by model.fit in EPOCHS epochs of
    STEPS // EPOCHS batches, with KerasState and the three callbacks
    (a commit every 2 batches and at each epoch's end).  A part-done
    epoch resumes as a fit of its remaining batches (docs/elastic.md);
    the batch of global step g is filled with (rank + 1) * (g + 1)."""

    EPOCHS = 2

    def __init__(self) -> None:
        super().__init__()
        import hbcore_tf.keras
        self.hvd_keras = hbcore_tf.keras
        self.opt = hbcore_tf.keras.DistributedOptimizer(self.opt,
                                                        op=hbcore_tf.Sum)
        self.model.compile(optimizer=self.opt, jit_compile=False,
                           loss=lambda y, pred: self.tf.reduce_sum(pred))
        self.state = hbcore_tf.keras.elastic.KerasState(
            self.model, self.opt, epoch=0, batch=0)

    def train(self, state, events: list, host: str) -> None:
        tf, elastic = self.tf, self.hvd_keras.elastic
        per_epoch = STEPS // self.EPOCHS

        class Steps(self.keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                before_step(events, host, self.first + batch)

            def on_train_batch_end(self, batch, logs=None):
                log_step(self.first + batch)

        while state.epoch < self.EPOCHS:
            first = state.epoch * per_epoch + state.batch
            count = per_epoch - state.batch
            x = np.repeat((hvd.rank() + 1) * np.arange(
                first + 1, first + count + 1, dtype=np.float32), 4)
            data = tf.data.Dataset.from_tensor_slices(
                (x.reshape(count, 1, 4), np.zeros((count, 1, 1), np.float32)))
            steps = Steps()
            steps.first = first
            self.model.fit(data, steps_per_epoch=count, epochs=1, verbose=0,
                           callbacks=[steps,
                                      elastic.UpdateBatchStateCallback(state),
                                      elastic.UpdateEpochStateCallback(state),
                                      elastic.CommitStateCallback(state, 2)])


def kill_hosting_process() -> None:
    """The killhosting event: the process that started this rank's hydra
    proxy (hbcore/launcher/manual/hosted_rank.py) is SIGKILLed; this rank then
    waits to be stopped (the others cannot commit without it)."""
    proc = psutil.Process()
    while "hydra_pmi_proxy" not in " ".join(proc.cmdline()):
        proc = proc.parent()
    proc.parent().kill()
    threading.Event().wait()


def before_step(events: list, host: str, s: int) -> None:
    """The kill / killhost / exit0 / stop / hang / killhosting events of
    step ``s`` on
    ``host``."""
    for kind, where, at in events:
        if (kind, where, int(at)) == ("killhosting", host, s) and once(
                "%s:%s:%s" % (kind, where, at)):
            kill_hosting_process()
        if where == host and int(at) == s and kind in (
                "kill", "killhost", "exit0", "stop", "hang") and once(
                    "%s:%s:%s" % (kind, where, at)):
            if kind == "stop":
                # Frozen here until its wrapper kills it; should it ever
                # run on, its step would go on as if nothing happened.
                os.kill(os.getpid(), signal.SIGSTOP)
                continue
            if kind == "hang":
                threading.Event().wait()
            if kind == "killhost":
                lose_host(host)
            if kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)


def arm_kill_in_write(events: list, host: str, s: int) -> None:
    """The killwrite event of the commit after step ``s`` on ``host``: the
    next Store.write of this rank writes half its bytes to its temporary
    file and SIGKILLs the rank."""
    from hbcore.elastic.store import Store
    for kind, where, at in events:
        if (kind, where, int(at)) == ("killwrite", host, s) and once(
                "%s:%s:%s" % (kind, where, at)):
            def write_half_and_die(store, key, commit, chunks, parts=0,
                                   part=0):
                data = b"".join(bytes(c) for c in chunks)
                path = os.path.join(store._dir, store._name(
                    key, commit, parts, part)) + ".tmp%d" % store._slot
                with open(path, "wb") as f:
                    f.write(data[:len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            Store.write = write_half_and_die


def log_step(s: int) -> None:
    with open(os.path.join(OUT_DIR, "steps.log"), "a") as f:
        f.write("%s %d %d\n" % (os.environ["HB_ELASTIC_GENERATION"],
                                hvd.size(), s))


def train_loop(trainer, state, events: list, host: str) -> None:
    """The custom loop of the numpy, Keras and v1 trainers."""
    after_commit = getattr(trainer, "after_commit", lambda: None)
    if int(os.environ["HB_ELASTIC_GENERATION"]) > 0 and hasattr(
            trainer, "dump"):
        trainer.dump("restored.%s.json" % os.environ["HB_ELASTIC_GENERATION"])
    for state.step in range(state.step, STEPS):
        s = state.step
        before_step(events, host, s)
        trainer.step(s)
        log_step(s)
        if s % 2 == 1:
            state.step = s + 1
            arm_kill_in_write(events, host, s)
            state.commit()
            after_commit()
        for kind, where, at in events:
            if kind in ("add", "remove") and int(at) == s and (
                    (where in names(os.environ["HB_ELASTIC_HOSTS"]))
                    == (kind == "remove")):
                if hvd.rank() == 0:
                    change_hosts(kind, where)
                state.step = s + 1
                try:
                    state.commit()
                    # Every rank waits here for the driver's notice
                    # (pacing only: the interrupt ends the wait).
                    while True:
                        state.check_host_updates()
                        time.sleep(0.05)
                except hvd.HostsUpdatedInterrupt as interrupt:
                    with open(os.path.join(OUT_DIR, "skip_sync.%s.%d" % (
                            os.environ["HB_ELASTIC_GENERATION"],
                            hvd.rank())), "w") as f:
                        f.write(str(interrupt.skip_sync))
                    raise
    state.step = STEPS


TRAINERS = {"numpy": NumpyTrainer, "keras": KerasTrainer, "v1": V1Trainer,
            "fit": FitTrainer, "sharded_v1": ShardedV1Trainer,
            "sharded_keras": ShardedKerasTrainer}


def job(mode: str = "numpy") -> dict:
    """Trains under hvd.elastic.run; returns this rank's report (also the
    function that tests launch with hbcore.run)."""
    hvd.init()
    trainer = TRAINERS[mode]()
    host = host_of_rank(parse_hosts_var(os.environ["HB_ELASTIC_HOSTS"]),
                        hvd.rank())[0]
    events = [e.split(":") for e in
              os.environ.get("HB_TEST_EVENTS", "").split(",") if e]
    with open(pid_path(hvd.rank()), "w") as f:
        f.write(str(os.getpid()))
    # The job's store, for the test to check that hbrun removed it.
    with open(os.path.join(OUT_DIR, "store.path"), "w") as f:
        f.write(os.environ["HB_ELASTIC_STORE"])
    state = trainer.state
    resets = []  # the reset callbacks' calls in this process
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state: hvd.elastic.ObjectState) -> None:
        if mode == "fit":
            trainer.train(state, events, host)
        else:
            train_loop(trainer, state, events, host)

    train(state)
    result = trainer.result()
    result.update({"size": hvd.size(), "resets": resets,
                   "generation": int(os.environ["HB_ELASTIC_GENERATION"])})
    return result


def main() -> None:
    result = job(sys.argv[1] if len(sys.argv) > 1 else "numpy")
    report(result, hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
