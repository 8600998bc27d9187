"""Rank script: integer "training" under hbrun's elastic driver.

Step s adds the allreduce-Sum of (rank + 1) * (s + 1) to ``state.total``
(exact in int64, so a replay with the world sizes is exact); state is
committed after every odd step.  Every rank appends ``generation size
step`` to $HB_TEST_OUT/steps.log after each step, so the test can replay
each step with the size of the last world that ran it.

Events (HB_TEST_EVENTS, comma separated, each done once per job: a marker
file in $HB_TEST_OUT records it):
    kill:HOST:STEP   the rank on emulated host HOST SIGKILLs itself before
                     step STEP's allreduce
    exit0:HOST:STEP  that rank exits 0 there (a worker that ends early)
    add:HOST:STEP    in a world without HOST, rank 0 adds HOST:1 to
                     $HB_TEST_HOSTS_FILE after step STEP, and every rank
                     commits and waits until the driver's host change
                     interrupts the world
    remove:HOST:STEP the same in a world with HOST, removing it
The final world's ranks report {total, size, generation, resets: the
world size seen by each reset callback call in this process}.

With ``--keras`` the state is an hbcore_tf TensorFlowKerasState instead:
a Keras Dense(4 -> 1) layer without bias trained by SGD(1, momentum=0.5)
on the loss sum(model(x)), x filled with (rank + 1) * (s + 1), through
DistributedGradientTape(op=Sum): every value stays a small dyadic
fraction, exact in float32, so the test replays it exactly as well.
The ranks then also report the kernel ("kernel") and the momentum.
"""
import os
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import OUT_DIR, report  # noqa: E402

import hbcore as hvd  # noqa: E402
from hbcore.launcher.elastic_protocol import (host_of_rank,  # noqa: E402
                                              parse_hosts_var)

STEPS = 10


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


class NumpyTrainer:
    """The integer sum of the module comment, in an ObjectState."""

    def __init__(self) -> None:
        self.state = hvd.elastic.ObjectState(step=0, total=0)

    def step(self, s: int) -> None:
        got = hvd.allreduce(np.array([(hvd.rank() + 1) * (s + 1)],
                                     np.int64), op=hvd.Sum, name="step")
        self.state.total += int(got[0])

    def result(self) -> dict:
        return {"total": self.state.total}


class KerasTrainer:
    """The Keras model of the module comment, in a TensorFlowKerasState."""

    def __init__(self) -> None:
        # Imported here: the numpy runs must not load TensorFlow.
        import tensorflow as tf
        import hbcore_tf
        from hbcore_tf._base import compat as _compat
        keras = _compat.keras_module()
        self.tf, self.hvd_tf = tf, hbcore_tf
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


def main() -> None:
    hvd.init()
    trainer = KerasTrainer() if "--keras" in sys.argv[1:] else NumpyTrainer()
    host = host_of_rank(parse_hosts_var(os.environ["HB_ELASTIC_HOSTS"]),
                        hvd.rank())[0]
    events = [e.split(":") for e in
              os.environ.get("HB_TEST_EVENTS", "").split(",") if e]
    state = trainer.state
    resets = []  # the reset callbacks' calls in this process
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state: hvd.elastic.ObjectState) -> None:
        for state.step in range(state.step, STEPS):
            s = state.step
            for kind, where, at in events:
                if where == host and int(at) == s and kind in (
                        "kill", "exit0") and once("%s:%s:%s" % (kind, where,
                                                                at)):
                    if kind == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    os._exit(0)
            trainer.step(s)
            with open(os.path.join(OUT_DIR, "steps.log"), "a") as f:
                f.write("%s %d %d\n" % (os.environ["HB_ELASTIC_GENERATION"],
                                        hvd.size(), s))
            if s % 2 == 1:
                state.step = s + 1
                state.commit()
            for kind, where, at in events:
                if kind in ("add", "remove") and int(at) == s and (
                        (where in names(os.environ["HB_ELASTIC_HOSTS"]))
                        == (kind == "remove")):
                    if hvd.rank() == 0:
                        change_hosts(kind, where)
                    state.step = s + 1
                    state.commit()
                    # Every rank waits here for the driver's notice
                    # (pacing only: the interrupt ends the wait).
                    while True:
                        state.check_host_updates()
                        time.sleep(0.05)
        state.step = STEPS

    train(state)
    result = trainer.result()
    result.update({"size": hvd.size(), "resets": resets,
                   "generation": int(os.environ["HB_ELASTIC_GENERATION"])})
    report(result, hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
