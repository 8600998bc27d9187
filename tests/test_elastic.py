"""Elastic training under hbrun's driver (docs/elastic.md), with real
processes on hosts emulated by hydra's fork launcher.

The rank script (rank_scripts/elastic_train.py) sums integers, into a
replicated total and into a table sharded by rows, so the final values
are checked against an exact replay of the steps with the world size of
the last generation that ran each one (from its log).
"""
import importlib.util
import json
import os
import re
import select
import signal
import stat
import subprocess
import sys

import numpy as np
import psutil
import pytest

from support.harness import base_env, run_hbrun, run_ranks, script_path
from support.procs import ENTRY, SCRIPTS, wait_gone
from support.waiting import wait_until

pytestmark = pytest.mark.timeout(200)

SCRIPT = script_path("elastic_train.py")
STEPS = 10
FORK = "--mpi-args=-launcher fork"


def store_of(out_dir: str) -> str:
    """The store of the job that wrote ``out_dir`` (elastic_train.py
    records it; hbrun removes it at the end). Not a listing of /dev/shm:
    other jobs on the machine have stores too."""
    with open(os.path.join(out_dir, "store.path")) as f:
        return f.read()


def step_sizes(out_dir: str) -> list:
    """The world size of each step, from elastic_train.py's log: a step
    run by several generations (redone after a rollback) counts with the
    size of the last one."""
    size_of = {}
    with open(os.path.join(out_dir, "steps.log")) as f:
        for line in f:
            generation, size, step = map(int, line.split())
            if generation >= size_of.get(step, (-1, 0))[0]:
                size_of[step] = (generation, size)
    assert sorted(size_of) == list(range(STEPS)), size_of
    return [size_of[s][1] for s in range(STEPS)]


def replay(out_dir: str) -> dict:
    """The total and table of elastic_train.py's steps: step s adds the
    sum over ranks of (rank + 1) * (s + 1) to the total, and
    (i + 1) * (s + 1) * n to both columns of row i."""
    sizes = step_sizes(out_dir)
    rows = np.arange(1, 8)[:, None] * np.ones((1, 2), np.int64)
    return {"total": sum((s + 1) * n * (n + 1) // 2
                         for s, n in enumerate(sizes)),
            "table": sum(rows * (s + 1) * n
                         for s, n in enumerate(sizes)).tolist()}


def replay_keras(out_dir: str) -> dict:
    """The kernel and momentum of elastic_train.py --keras, by numpy:
    SGD(1, momentum=0.5) on gradients (s + 1) * n (n + 1) / 2."""
    kernel = np.zeros(4)
    momentum = np.zeros(4)
    for s, n in enumerate(step_sizes(out_dir)):
        momentum = 0.5 * momentum - (s + 1) * n * (n + 1) / 2
        kernel = kernel + momentum
    return {"kernel": kernel.tolist(), "momentum": momentum.tolist()}


def logged_sizes(out_dir: str) -> list:
    """The world size of each generation, in generation order."""
    sizes = {}
    with open(os.path.join(out_dir, "steps.log")) as f:
        for line in f:
            generation, size, _ = map(int, line.split())
            sizes[generation] = size
    return [sizes[g] for g in sorted(sizes)]


def first_steps(out_dir: str) -> dict:
    """Generation -> the first step it ran (where it restored to)."""
    first = {}
    with open(os.path.join(out_dir, "steps.log")) as f:
        for line in f:
            generation, _, step = map(int, line.split())
            first[generation] = min(step, first.get(generation, step))
    return first


def assert_finished(run, np_final=None, expected=None) -> dict:
    """The job succeeded and every rank of its last world holds the
    replay's values (default: replay's total)."""
    assert run.returncode == 0 and not run.timed_out, run.describe()
    expected = expected or replay(run.out_dir)
    results = list(run.results.values())
    final = max(r["generation"] for r in results)
    results = [r for r in results if r["generation"] == final]
    size = results[0]["size"]
    assert len(results) == size, run.results
    for result in results:
        assert result == dict(expected, size=size, generation=final,
                              resets=[size] if final else []), run.results
    if np_final is not None:
        assert size == np_final, run.results
    return results[0]


def test_kill_9_of_hosts_of_ranks_0_and_1_recovers_from_the_last_commit():
    # 3 hosts x 1 rank; host hB (rank 1) is lost at step 3, its store
    # with it, then host hA at step 6 (rank 0 wherever hA runs): the
    # sharded table's rows of the lost hosts come from their second
    # copies; blacklisted hosts come back after 1 s and join at a commit.
    # Then hC's rank dies half way through writing the commit after step
    # 7 (its replicated values, the host's one writer): the job goes back
    # to the commit after step 5 and redoes steps 6 and 7 (the replay).
    run = run_ranks(SCRIPT, 3, timeout=180,
                    env={"HB_TEST_EVENTS": "killhost:hB:3,killhost:hA:6,"
                                           "killwrite:hC:7"},
                    hbrun_args=["-H", "hA:1,hB:1,hC:1", FORK, "--min-np",
                                "1", "--blacklist-cooldown-range", "1",
                                "1"])
    assert_finished(run)
    for event in ("killhost_hB_3", "killhost_hA_6", "killwrite_hC_7"):
        assert os.path.exists(os.path.join(run.out_dir, "done." + event))
    sizes = logged_sizes(run.out_dir)
    assert sizes[0] == 3 and 2 in sizes, sizes
    # hbrun said which rank ended generation 0 (the line that
    # benchmarks/elastic.py splits the detection by), and left the lost
    # hosts out of the next generation.
    assert re.search(r"hbrun: elastic generation 0 ended \(rank 1 on host "
                     r"hB killed by signal SIGKILL \(9\)\); its ranks "
                     r"stopped [0-9.]+ s after hbrun learnt it\n",
                     run.stderr), run.describe()
    assert "hbrun: elastic generation 1 on hA:1,hC:1\n" in run.stderr, (
        run.describe())
    store = store_of(run.out_dir)
    assert os.path.basename(store).startswith("hbcore-elastic-"), store
    assert not os.path.exists(store), "the job's store was left behind"


def test_kill_9_of_a_whole_host_of_2_x_2_keeps_its_sharded_rows():
    # Host hB is lost at step 3 (both its ranks SIGKILLed, its store
    # removed): hA's two ranks finish from the last commit, with hB's
    # rows of the sharded table from the copies hB's ranks sent to hA.
    run = run_ranks(SCRIPT, 4, timeout=180,
                    env={"HB_TEST_EVENTS": "killhost:hB:3"},
                    hbrun_args=["-H", "hA:2,hB:2", FORK, "--min-np", "2"])
    assert_finished(run, np_final=2)
    assert step_sizes(run.out_dir) == [4, 4] + [2] * 8, run.describe()
    assert "hbrun: elastic generation 1 on hA:2\n" in run.stderr, (
        run.describe())


KERAS_FLAVORS = [
    pytest.param({}, id="keras3"),
    pytest.param({"TF_USE_LEGACY_KERAS": "1"}, id="tf_keras",
                 marks=pytest.mark.skipif(
                     importlib.util.find_spec("tf_keras") is None,
                     reason="tf_keras is not installed")),
]


# (trainer, kill event, hosts, world sizes of the steps, first step of
# generation 1: the step after the last commit).
TF_KILLS = {
    # A custom TF2 loop with TensorFlowKerasState: rank 0 (hA) is killed
    # at step 3, two steps after the last commit.
    "keras": ("kill:hA:3", "hA:1,hB:1,hC:1", [3, 3] + [2] * 8, 2),
    # model.fit in 2 epochs of 5 batches with KerasState and the three
    # callbacks, a commit every 2 batches and at epoch end: rank 0 is
    # killed at global step 7 (epoch 1, batch 2); hB and hC resume epoch
    # 1 at batch 2 with a fit of its 3 remaining batches.
    "fit": ("kill:hA:7", "hA:1,hB:1,hC:1", [3] * 7 + [2] * 3, 7),
    # A tf.compat.v1 graph with TensorFlowState(session=...).
    "v1": ("kill:hB:3", "hA:1,hB:1", [2, 2] + [1] * 8, 2),
}


def run_with_a_hung_rank(event: str, *limit_flag: str,
                         hosts: str = "hA:1,hB:1"):
    """``hosts`` with ``--min-np 1`` and ``limit_flag``, hB's rank hung by
    ``event`` (stop or hang) before step 3, after the commit after step
    1."""
    return run_ranks(SCRIPT, hosts.count(",") + 1, timeout=60,
                     env={"HB_TEST_EVENTS": "%s:hB:3" % event},
                     hbrun_args=["-H", hosts, FORK, "--min-np", "1"]
                     + list(limit_flag))


def test_a_rank_stopped_by_sigstop_is_removed_like_a_dead_one():
    # hB's rank SIGSTOPs itself before step 3, after the commit after step
    # 1: it never dies, and hA's rank blocks on it in the step's
    # allreduce. Its wrapper sees it stopped for --elastic-timeout (2 s
    # here; hang_watch.py) and SIGKILLs it; hbrun names it and why, leaves
    # hB out, and hA finishes from the commit (the replay redoes step 2).
    # (8-10 s: the 2 s limit and two generations' start-up.)
    run = run_with_a_hung_rank("stop", "--elastic-timeout", "2")
    assert_finished(run, np_final=1)
    assert step_sizes(run.out_dir) == [2, 2] + [1] * 8, run.describe()
    assert re.search(r"hbrun: elastic generation 0 ended \(rank 1 on host "
                     r"hB killed by signal SIGKILL \(9\) by hbrun: it made "
                     r"no progress: stopped \(state T\) for (2|3)\.\d s "
                     r"\(limit: --elastic-timeout 2\)\); its ranks stopped "
                     r"[0-9.]+ s after hbrun learnt it\n", run.stderr), (
        run.describe())
    assert "hbrun: elastic generation 1 on hA:1\n" in run.stderr, (
        run.describe())
    with open(os.path.join(run.out_dir, "pid.0.1")) as f:
        assert not wait_gone([int(f.read())]), "the stopped rank is left"


@pytest.mark.parametrize("hosts, left", [("hA:1,hB:1", "hA:1"),
                                          ("hA:1,hB:1,hC:1", "hA:1,hC:1")])
def test_a_rank_hung_in_its_own_code_ends_its_world_at_the_elastic_timeout(
        hosts, left):
    # hB's rank blocks forever before step 3, its process running: the
    # others wait in the step's allreduce. No stall shutdown time is set,
    # so in an elastic job the core's stall shutdown comes after
    # --elastic-timeout (3 s), fails them, and they leave (exit 75)
    # without MPI_Finalize, which would wait for hB's rank forever
    # (hbcore/elastic/run.py), naming rank 1 in their status. The hung
    # rank is a lost rank: hB is blacklisted as after a death, and the
    # others finish from the commit after step 1 (the replay redoes step
    # 2). (About 9-11 s each: the 3 s stall, the settle second and two
    # generations' start-up; a shorter limit risks a false stall on a
    # loaded machine.)
    run = run_with_a_hung_rank("hang", "--elastic-timeout", "3", hosts=hosts)
    size = hosts.count(",") + 1
    assert_finished(run, np_final=size - 1)
    assert step_sizes(run.out_dir) == [size] * 2 + [size - 1] * 8, (
        run.describe())
    assert logged_sizes(run.out_dir) == [size, size - 1], run.describe()
    # Named once, however many ranks saw it.
    assert run.stderr.count(
        "hbrun: elastic generation 0: rank 1 on host hB hung in its own "
        "code (the stall shutdown ended its world)\n") == 1, run.describe()
    assert re.search(r"\[0\]<stderr>:hbcore.elastic: rank 0 leaves "
                     r"generation 0 to re-form the job: ShutdownError: "
                     r"stalled tensor 'step' was submitted by rank\(s\) "
                     r"0(, 2)? [0-9]+ s ago but not yet by rank\(s\) 1:.*"
                     r"\(HB_ELASTIC_TIMEOUT_SECONDS=3\)", run.stderr), (
        run.describe())
    assert "hbrun: elastic generation 1 on %s\n" % left in run.stderr, (
        run.describe())


def test_a_stall_shutdown_names_the_ranks_stuck_in_their_own_code():
    # The core's stall shutdown (stall_inspector.cc) names the global ranks
    # that never submitted the tensor; any other failure names none.
    from hbcore.elastic.run import stalled_ranks
    from hbcore.exceptions import ShutdownError, WaitTimeoutError
    text = ("stalled tensor 'step' was submitted by rank(s) 0, 3 4 s ago but "
            "not yet by rank(s) 1, 2: those ranks are busy elsewhere (a "
            "checkpoint or an evaluation on some ranks only), or have "
            "diverged (HB_ELASTIC_TIMEOUT_SECONDS=3)")
    assert stalled_ranks(ShutdownError(text)) == [1, 2]
    assert stalled_ranks(WaitTimeoutError(text)) == []
    assert stalled_ranks(ShutdownError("rank 1 left the world")) == []


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="TensorFlow is not installed")
@pytest.mark.parametrize("trainer, flavor", [
    pytest.param(trainer, flavor.values[0], marks=flavor.marks,
                 id="%s-%s" % (trainer, flavor.id))
    for trainer in ("keras", "fit") for flavor in KERAS_FLAVORS]
    + [pytest.param("v1", {}, id="v1")])
def test_kill_9_tf_states_restore_weights_and_optimizer_slots(trainer,
                                                              flavor):
    # The survivors redo the steps since the last commit from the
    # committed kernel and momentum, and match the numpy replay.
    event, hosts, sizes, resumed = TF_KILLS[trainer]
    np_ = len(hosts.split(","))
    run = run_ranks(SCRIPT, np_, timeout=180, args=[trainer],
                    env=dict(flavor, HB_TEST_EVENTS=event),
                    hbrun_args=["-H", hosts, FORK, "--min-np",
                                str(np_ - 1)])
    assert_finished(run, np_final=np_ - 1,
                    expected=replay_keras(run.out_dir))
    assert step_sizes(run.out_dir) == sizes, run.describe()
    with open(os.path.join(run.out_dir, "steps.log")) as f:
        redone = sorted({int(line.split()[2]) for line in f
                         if line[0] == "1"})
    assert redone == list(range(resumed, STEPS)), redone


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                    reason="TensorFlow is not installed")
@pytest.mark.parametrize("trainer", ["sharded_v1", "sharded_keras"])
def test_lost_host_sharded_tables_come_back_resharded_row_by_row(trainer):
    # A v1 graph in hb.scope, or a Keras 3 model with ShardedEmbedding in
    # hb.scope, with a sharded table and Adagrad: host hB (rank 1, its
    # store with it) is lost at step 3. The state finds the table and its
    # slot itself; after the restore at 2 ranks the whole table, dense
    # variables and slots equal the last commit at 3 ranks, row by row
    # (hB's rows come from their copy on hC), and training ends with the
    # same values on both ranks.
    run = run_ranks(SCRIPT, 3, timeout=180, args=[trainer],
                    env={"HB_TEST_EVENTS": "killhost:hB:3"},
                    hbrun_args=["-H", "hA:1,hB:1,hC:1", FORK, "--min-np",
                                "2"])
    assert run.returncode == 0 and not run.timed_out, run.describe()
    assert step_sizes(run.out_dir) == [3, 3] + [2] * 8, run.describe()
    with open(os.path.join(run.out_dir, "commit.0.json")) as f:
        committed = json.load(f)
    with open(os.path.join(run.out_dir, "restored.1.json")) as f:
        restored = json.load(f)
    # The table and its Adagrad slot: 7 rows each, whole.
    assert sorted(len(v) for v in committed.values()).count(7) == 2, (
        committed)
    assert restored == committed
    results = [r for r in run.results.values() if r["generation"] == 1]
    assert len(results) == 2 and results[0] == results[1], run.results
    assert {k: results[0][k] for k in committed} != committed  # trained on


def _discovery_script(directory: str) -> str:
    hosts = os.path.join(directory, "hosts")
    with open(hosts, "w") as f:
        f.write("hA:1\nhB:1\n")
    return hosts


def test_discovery_adds_and_removes_hosts_and_an_early_exit_0_goes_on(
        tmp_path):
    # hA, hB from the script; after step 2 rank 0 adds hC: the world grows
    # to 3 at the next commit, without rollback; after step 5 it removes
    # hB: the world shrinks to hA, hC at that commit, again without
    # rollback; at step 7 the rank on hC exits 0: its slot leaves and hA
    # finishes alone from the commit after step 5.
    hosts = _discovery_script(str(tmp_path))
    run = run_ranks(SCRIPT, 2, timeout=180,
                    env={"HB_TEST_EVENTS": "add:hC:2,remove:hB:5,exit0:hC:7",
                         "HB_TEST_HOSTS_FILE": hosts},
                    hbrun_args=[FORK, "--min-np", "1",
                                "--host-discovery-script", "cat " + hosts])
    assert_finished(run, np_final=1)
    assert logged_sizes(run.out_dir) == [2, 3, 2, 1], run.describe()
    assert step_sizes(run.out_dir) == [2] * 3 + [3] * 3 + [1] * 4
    with open(os.path.join(run.out_dir, "steps.log")) as f:
        steps = [tuple(map(int, line.split())) for line in f]
    # No rollback at the planned changes; back to the commit after step 5
    # when hC left early.
    assert [min(s for g, _, s in steps if g == gen)
            for gen in range(4)] == [0, 3, 6, 6], steps
    for line in ("generation 1 on hA:1,hB:1,hC:1\n",
                 "generation 2 on hA:1,hC:1\n", "generation 3 on hA:1\n"):
        assert "hbrun: elastic " + line in run.stderr, run.describe()
    # HostsUpdatedInterrupt.skip_sync as Horovod's: False where hC joined,
    # True where hB only left; the same on every rank.
    flags = {}
    for name in os.listdir(run.out_dir):
        if name.startswith("skip_sync."):
            with open(os.path.join(run.out_dir, name)) as f:
                flags[tuple(map(int, name.split(".")[1:]))] = f.read()
    assert flags == {(0, 0): "False", (0, 1): "False", (1, 0): "True",
                     (1, 1): "True", (1, 2): "True"}, flags


@pytest.mark.parametrize("flags, env, message", [
    (["-H", "hA:1,hB:1", "--min-np", "2"], {"HOROVOD_ELASTIC_TIMEOUT": "2"},
     "hbrun: elastic job failed: fewer than 2 slots (--min-np) for 2 s "
     "(--elastic-timeout): usable hosts hA:1\n"),
    (["-H", "hA:1,hB:1", "--min-np", "1", "--reset-limit", "0"], {},
     "hbrun: elastic job failed: reset limit 0 (--reset-limit) reached\n"),
    # hB dies in generation 0, hA (alone) in generation 1: no host is left
    # and none comes back (no cool-down, no discovery script).
    (["-H", "hA:1,hB:1", "--min-np", "1"],
     {"HB_TEST_EVENTS": "kill:hB:1,kill:hA:2"},
     "hbrun: elastic job failed: every host is blacklisted (hA, hB)\n"
     "hbrun: failures:\n  generation 0: rank 1 on host hB killed by "
     "signal SIGKILL (9)\n  generation 1: rank 0 on host hA killed by "
     "signal SIGKILL (9)\n"),
])
def test_limits_end_the_job_and_list_the_failures(flags, env, message):
    env = dict({"HB_TEST_EVENTS": "kill:hB:1"}, **env)
    run = run_ranks(SCRIPT, 2, timeout=120, env=env,
                    hbrun_args=flags + [FORK])
    assert run.returncode == 1 and not run.timed_out, run.describe()
    assert message in run.stderr, run.describe()
    assert ("hbrun: failures:\n  generation 0: rank 1 on host hB killed by "
            "signal SIGKILL (9)\n") in run.stderr, run.describe()
    assert not run.results, run.results


@pytest.mark.parametrize("script, message", [
    ("printf 'hA:1\\nhB:two\\n'",
     "hbrun: elastic job failed: --host-discovery-script printf 'hA:1\\nhB:"
     "two\\n' printed 'hB:two', which is not 'host' or 'host:slots': bad "
     "slot count 'two' for host 'hB' in line 2\n"),
    ("printf 'a b c\\n'",
     "printed 'a b c', which is not 'host' or 'host:slots': bad host name "
     "'a b c' in line 1\n"),
    ("echo no hosts here >&2; exit 3",
     "hbrun: elastic job failed: --host-discovery-script echo no hosts here "
     ">&2; exit 3 exited with code 3: no hosts here\n"),
])
def test_a_bad_discovery_script_is_a_clear_error(script, message):
    done = run_hbrun(1, ["true"], timeout=60,
                     hbrun_args=["--host-discovery-script", script, FORK])
    assert done.returncode == 1, done.describe()
    assert message in done.stderr, done.stderr


def test_discovery_failing_while_the_job_runs_ends_it(tmp_path):
    # The script answers once, then fails: the running world is stopped
    # and the error named; nothing hangs (the ranks would wait forever).
    flag = tmp_path / "answered"
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\nif [ -e %s ]; then echo gone >&2; exit 4; "
                      "fi\ntouch %s\necho hA:1\n" % (flag, flag))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    done = run_hbrun(1, ["sleep", "100"], timeout=60,
                     hbrun_args=["--host-discovery-script", str(script),
                                 FORK])
    assert done.returncode == 1, done.describe()
    assert ("hbrun: elastic job failed: --host-discovery-script %s exited "
            "with code 4: gone\n" % script) in done.stderr, done.stderr


def test_blacklist_cooldown_doubles_from_min_up_to_max():
    from hbcore.launcher.elastic.discovery import Blacklist
    from hbcore.launcher.hosts import Host
    now = [100.0]
    blacklist = Blacklist((10, 25), clock=lambda: now[0])
    blacklist.add("hB")
    hosts = [Host("hA", 1), Host("hB", 2)]
    assert blacklist.usable(hosts) == [Host("hA", 1)]
    now[0] = 109.9
    assert blacklist.blocked("hB")
    now[0] = 110.0
    assert blacklist.usable(hosts) == hosts
    blacklist.add("hB")  # 2nd failure: 20 s
    now[0] = 129.9
    assert blacklist.blocked("hB")
    now[0] = 130.0
    assert not blacklist.blocked("hB")
    blacklist.add("hB")  # 3rd: 40 s, capped at 25
    now[0] = 154.9
    assert blacklist.blocked("hB")
    now[0] = 155.0
    assert not blacklist.blocked("hB")
    forever = Blacklist(None, clock=lambda: now[0])
    forever.add("hA")
    now[0] = 1e12
    assert forever.blocked("hA") and not forever.blocked("hB")


def test_hosts_keep_their_first_seen_order_and_max_np_caps_the_newest():
    from hbcore.launcher.elastic.driver import _Hosts
    from hbcore.launcher.hosts import Host
    from hbcore.launcher.job_spec import ElasticSettings
    settings = ElasticSettings(np=2, min_np=1, max_np=4,
                               discovery_script=None, fixed_hosts=None,
                               slots_per_host=1, timeout_s=1, reset_limit=None,
                               cooldown_range=None)
    hosts = _Hosts(settings)
    assert hosts.usable([Host("hB", 2), Host("hA", 1)]) == [
        Host("hB", 2), Host("hA", 1)]
    # hC printed first later still comes after the older hosts, and the
    # 4-slot cap takes its slots from the newest host.
    assert hosts.usable([Host("hC", 3), Host("hA", 1), Host("hB", 2)]) == [
        Host("hB", 2), Host("hA", 1), Host("hC", 1)]
    hosts.finished["hB"] = 1
    hosts.blacklist.add("hA")
    assert hosts.usable([Host("hA", 1), Host("hB", 2), Host("hC", 3)]) == [
        Host("hB", 1), Host("hC", 3)]


def test_host_change_notice_answers_only_its_own_jobs_ranks():
    from hbcore.launcher.elastic import notice
    from hbcore.launcher.rank.store_keeper import driver_alive
    server = notice.NoticeServer()

    def wait_for_answer(generation):
        # The rank's poll never blocks; wait until its connection has the
        # driver's answer, then poll.
        conn = notice._CONNECTIONS[(server.address, generation)]
        assert select.select([conn], [], [], 20)[0], "no answer in 20 s"

    try:
        assert notice.hosts_updated(server.address, 5, server.key) == (
            notice.NO_CHANGE)
        server.post(5)
        wait_for_answer(5)
        assert notice.hosts_updated(server.address, 5, server.key) == (
            notice.ADDED)
        # Only removals: Horovod's skip_sync case; a later addition in the
        # same generation makes it a change that added hosts.
        server.post(7, removed_only=True)
        server.post(8, removed_only=True)
        server.post(8, removed_only=False)
        for generation, kind in ((7, notice.REMOVED), (8, notice.ADDED)):
            notice.hosts_updated(server.address, generation, server.key)
            wait_for_answer(generation)
            assert notice.hosts_updated(server.address, generation,
                                        server.key) == kind
        # A peer without the job's key is refused, by type and message.
        with pytest.raises(OSError, match="refused this rank's proof of "
                           "HB_ELASTIC_NOTICE_KEY"):
            # The refusal may already be there at the first poll.
            if not notice.hosts_updated(server.address, 6, "00" * 32):
                wait_for_answer(6)
                notice.hosts_updated(server.address, 6, "00" * 32)
        # The store keepers' question (rank/store_keeper.py): the driver
        # lives only for its own job's key; another job's driver on the
        # address is no answer for this one.
        assert driver_alive(server.address, server.key) is True
        assert driver_alive(server.address, "00" * 32) is False
    finally:
        server.close()
    # Gone: nothing listens on its port any more.
    assert driver_alive(server.address, server.key) is False


KEEPER = """
import os, shutil, sys
sys.path.insert(0, sys.argv[1])  # by path, as rank_wrapper.py runs it
from store_keeper import start_keeper
env = {"HB_ELASTIC_STORE": sys.argv[2], "HB_ELASTIC_NOTICE": sys.argv[3],
       "HB_ELASTIC_NOTICE_KEY": sys.argv[4]}
print(start_keeper(env, os.path.join(sys.argv[2], "finished.0.0")))
if sys.argv[5] == "finished":
    open(os.path.join(sys.argv[2], "finished.0.0"), "w").close()
if sys.argv[5] == "replaced":
    shutil.rmtree(sys.argv[2])
    os.makedirs(sys.argv[2])
"""


def test_a_store_keeper_removes_the_store_once_its_driver_is_gone(tmp_path):
    # rank/store_keeper.py's invariants, with a python process in the
    # wrapper's place and a notice server in the driver's: the keeper
    # outlives the "wrapper" and removes the store only once the driver
    # is gone, and only the directory its job used.
    from hbcore.launcher.elastic.notice import NoticeServer
    import hbcore.launcher.rank as rank_package
    rank_dir = os.path.dirname(rank_package.__file__)

    def keeper(store, server, mode):
        done = subprocess.run(
            [sys.executable, "-c", KEEPER, rank_dir, str(store),
             server.address, server.key, mode], capture_output=True,
            text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    # The job ended: the rank finished, so its keeper watches the driver;
    # at the job's end the driver tells it and waits for it, and it
    # removes the store (on a host the driver's own removal cannot reach).
    server = NoticeServer()
    finished = tmp_path / "finished"
    pid = keeper(finished, server, "finished")
    wait_until(lambda: server._watchers == 1, timeout=15,
               what="the finished rank's keeper to watch the driver")
    assert finished.is_dir()
    server.close()
    assert not finished.exists()
    assert not wait_gone([pid], timeout=15)
    # A re-formation: the driver lives, so the keeper leaves at once and
    # the store stays for the next generation.
    server = NoticeServer()
    kept = tmp_path / "kept"
    try:
        pid = keeper(kept, server, "reform")
        assert not wait_gone([pid], timeout=15)
        assert kept.is_dir()
    finally:
        server.close()
    # The driver is gone, but the path now names another directory (a new
    # job's store under the same name): not the keeper's to remove.
    replaced = tmp_path / "replaced"
    pid = keeper(replaced, server, "replaced")
    assert not wait_gone([pid], timeout=15)
    assert replaced.is_dir()


def test_a_change_that_only_removes_hosts_or_slots_skips_sync():
    from hbcore.launcher.elastic.driver import removed_only
    from hbcore.launcher.hosts import Host
    current = [Host("hA", 2), Host("hB", 1)]
    assert removed_only(current, [Host("hA", 2)])
    assert removed_only(current, [Host("hA", 1), Host("hB", 1)])
    assert not removed_only(current, [Host("hA", 2), Host("hC", 1)])
    assert not removed_only(current, [Host("hA", 3)])


def test_buddies_are_on_the_next_host_and_parts_reshard_in_id_order():
    from hbcore.elastic.replicas import buddy_rank
    from hbcore.elastic.reshard import Resharder, pack_part, row_block
    from hbcore.elastic.state import newest_whole
    hosts = [("hA", 2), ("hB", 3), ("hC", 1)]
    assert [buddy_rank(hosts, r) for r in range(6)] == [2, 3, 5, 5, 5, 0]
    assert buddy_rank([("hA", 4)], 3) is None
    # 10 rows over 3 then 4 ranks, as np.array_split splits them.
    table = np.arange(20).reshape(10, 2)
    old = np.array_split(table, 3)
    assert [row_block(10, 3, r) for r in range(3)] == [(0, 4), (4, 7),
                                                       (7, 10)]
    parts = [pack_part({"t": (10, old[r])}, 3, r) for r in range(3)]
    for rank, expected in enumerate(np.array_split(table, 4)):
        resharder = Resharder(4, rank)
        for part in parts:
            resharder.take(part)
        np.testing.assert_array_equal(resharder.blocks()["t"], expected)
    missing = Resharder(2, 1)
    missing.take(parts[1])
    with pytest.raises(ValueError, match="table 't': 2 of this rank's 5 "
                       "rows were in the parts read"):
        missing.blocks()
    # Commit 4 lacks part 1 of 2 everywhere: commit 3 is the newest whole.
    held = [{(4, 0, 0), (4, 2, 0), (3, 0, 0), (3, 2, 0)},
            {(3, 2, 1), (3, 3, 2)}]
    assert newest_whole(held, True) == (3, 2)
    assert newest_whole(held, False) == (4, 0)
    assert newest_whole([{(3, 2, 0)}], True) is None


def test_a_snapshot_copies_once_into_its_own_buffers_and_reads_back():
    from hbcore.elastic.snapshot import Snapshot

    def address(buffer):
        return np.frombuffer(buffer, np.uint8).ctypes.data

    values = {"w": np.arange(6.0), "n": [1, 2]}
    first = Snapshot.take(values)
    values["w"] += 1
    values["n"].append(3)
    got = first.value()
    assert got["w"].tolist() == [0, 1, 2, 3, 4, 5] and got["n"] == [1, 2]
    got["w"][0] = 99  # a fresh copy: the snapshot keeps its values
    assert first.value()["w"][0] == 0
    # The next commit of arrays of the same sizes overwrites the buffers.
    second = Snapshot.take(values, reuse=first)
    assert address(second.buffers[0]) == address(first.buffers[0])
    assert second.value()["w"].tolist() == [1, 2, 3, 4, 5, 6]
    # An owned array is kept, not copied.
    owned = np.ones(4, np.float32)
    kept = Snapshot.take({"v": owned}, owned=[owned])
    assert address(kept.buffers[0]) == owned.ctypes.data
    data = second.to_bytes()
    assert data == b"".join(bytes(c) for c in second.chunks())
    back = Snapshot.from_bytes(data).value()
    assert back["w"].tolist() == [1, 2, 3, 4, 5, 6] and back["n"] == [1, 2, 3]
    with pytest.raises(ValueError, match=r"hbcore.elastic: not a commit "
                       r"snapshot \(starts with b'abcd'\)"):
        Snapshot.from_bytes(b"abcd" + data[4:])
    with pytest.raises(ValueError, match="hbcore.elastic: a commit snapshot "
                       "of %d bytes holds %d" % (len(data) - 1, len(data))):
        Snapshot.from_bytes(data[:-1])


def test_store_one_rep_writer_per_host_and_a_pruned_file_is_reused(
        tmp_path):
    from hbcore.elastic.store import Store
    hosts = [("hA", 2), ("hB", 1)]
    stores = [Store(str(tmp_path), hosts, r, 3) for r in range(3)]
    assert [s.writes_replicated for s in stores] == [True, False, True]
    first, second = stores[0], stores[1]  # both on hA
    first.write("K", 0, [b"abc", b"def"])
    first.write("K", 1, [b"xy"])
    second.write("K", 1, [b"part1"], 3, 1)
    assert second.entries("K") == {(0, 0, 0), (1, 0, 0), (1, 3, 1)}
    assert second.read("K", 0) == b"abcdef"
    rep0 = os.stat(os.path.join(str(tmp_path), "hA", "K.0.rep")).st_ino
    # A half-written file of a killed writer is no entry.
    with open(os.path.join(str(tmp_path), "hA", "K.2.rep.tmp0"), "wb") as f:
        f.write(b"ab")
    first.prune("K", 1)
    assert first.entries("K") == {(1, 0, 0), (1, 3, 1)}
    # Commit 0's file is the next write's, overwritten in place.
    first.write("K", 2, [b"0123456789"])
    path = os.path.join(str(tmp_path), "hA", "K.2.rep")
    assert os.stat(path).st_ino == rep0
    assert second.read("K", 2) == b"0123456789"
    first.write("K", 2, [b"0123"])  # a smaller commit: no stale tail
    assert second.read("K", 2) == b"0123"
    assert second.read("K", 1, 3, 1) == b"part1"
    assert stores[2].entries("K") == set()  # hB's own directory
    # A file the first slot has mapped goes, through the second slot's
    # prune, to the second slot, which writes a shorter part into it;
    # when it comes back to the first slot, its mapping is still good.
    first.write("M", 0, [b"x" * 8192])
    second.prune("M", 1)
    second.write("M", 1, [b"short"], 3, 1)
    first.prune("M", 2)
    first.write("M", 2, [b"y" * 8192])
    assert second.read("M", 2) == b"y" * 8192
    assert second.entries("M") == {(2, 0, 0)}


def test_hbcore_run_with_min_np_goes_on_after_a_host_is_lost(tmp_path):
    # hbcore.run(fn, min_np=...) with horovod.run's names: host hB is lost
    # at step 3; the results are the last world's, from the commit.
    sys.path.insert(0, os.path.dirname(SCRIPT))
    import elastic_train
    from support.procs import Watchdog
    from hbcore.launcher.run_fn import run
    with Watchdog(120):
        results = run(elastic_train.job, num_proc=2, min_num_proc=1,
                      hosts="hA:1,hB:1", mpi_args="-launcher fork",
                      env={"HB_TEST_OUT": str(tmp_path),
                           "HB_TEST_EVENTS": "killhost:hB:3"})
    assert step_sizes(str(tmp_path)) == [2, 2] + [1] * 8
    assert results == [dict(replay(str(tmp_path)), size=1, generation=1,
                            resets=[1])]
    with pytest.raises(ValueError, match="min_np 3 is more than np 2"):
        run(elastic_train.job, np=2, min_np=3)
    with pytest.raises(ValueError, match="host_discovery_script: not with "
                       "hosts or hostfile"):
        run(elastic_train.job, hosts="hA:1", host_discovery_script="true",
            min_np=1)
    with pytest.raises(ValueError, match="reset_limit and cooldown_range "
                       "are for an elastic job"):
        run(elastic_train.job, np=1, reset_limit=2)


def test_kill_9_of_an_elastic_hbrun_ends_its_job_on_every_host(tmp_path):
    # The elastic driver runs threads, so mpiexec cannot get the kernel's
    # death signal when hbrun dies (supervisor.py): the job watchdog
    # (hbcore/launcher/job_watchdog.py) must stop mpiexec, both emulated
    # hosts' proxies and the ranks. Before it, they ran on for minutes.
    # And the store in /dev/shm must go with them, with each emulated
    # host's directory: the rank wrappers' keepers remove it once the
    # driver is gone (hbcore/launcher/rank/store_keeper.py). Before them,
    # it stayed until the next elastic hbrun on the machine.
    hosts = _discovery_script(str(tmp_path))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    # fail_rank.py with a rank that does not exist: every rank sleeps.
    hbrun = subprocess.Popen(
        [sys.executable, ENTRY, "hbrun", "-np", "2", "--min-np", "1",
         "--max-np", "2", "--host-discovery-script", "cat " + hosts, FORK,
         sys.executable, os.path.join(SCRIPTS, "fail_rank.py"),
         str(pid_dir), "99", "exit3"],
        env=base_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    job = []
    try:
        wait_until(lambda: len(os.listdir(pid_dir)) >= 2, timeout=60,
                   what="both ranks to start")
        job = psutil.Process(hbrun.pid).children(recursive=True)
        ranks = [int((pid_dir / name).read_text())
                 for name in os.listdir(pid_dir)]
        assert set(ranks) <= {p.pid for p in job}, (ranks, job)
        # Each emulated host's directory with a commit file in it, as
        # hbcore.elastic's store makes them (these ranks commit nothing).
        store = psutil.Process(ranks[0]).environ()["HB_ELASTIC_STORE"]
        for host in ("hA", "hB"):
            os.makedirs(os.path.join(store, host))
            with open(os.path.join(store, host, "ObjectState0.1.rep"),
                      "wb") as f:
                f.write(b"x" * 4096)
        os.kill(hbrun.pid, signal.SIGKILL)
        hbrun.wait(timeout=10)
        left = wait_gone([p.pid for p in job], timeout=15)
        assert not left, "still running 15 s after kill -9 of hbrun: %s" % [
            " ".join(psutil.Process(pid).cmdline()) for pid in left]
        wait_until(lambda: not os.path.exists(store), timeout=15,
                   what="the keepers to remove the store %s" % store)
    finally:
        for proc in job:
            try:
                proc.kill()
            except psutil.Error:
                pass
        if hbrun.poll() is None:
            hbrun.kill()
        hbrun.wait()
        if hbrun.stderr is not None:
            hbrun.stderr.close()
