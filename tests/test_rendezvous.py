"""The rendezvous on its own (hbcore/launcher/manual/rendezvous.py): a
coordinator and its members as threads of this process on 127.0.0.1, with
proxy data made up here (no hydra, no MPI), plus hydra's manual-launch
lines (hydra_manual.py) and the TF_CONFIG front end's per-worker
TF_CONFIG."""
import json
import socket
import threading

import pytest

from support.hbcore_path import import_hbcore_package

import_hbcore_package()
from hbcore import tf_config  # noqa: E402
from hbcore.launcher.errors import LauncherError  # noqa: E402
from hbcore.launcher.manual import hydra_manual  # noqa: E402
from hbcore.launcher.manual.rendezvous import (CONTEXT, Arrival,  # noqa: E402
                                               Coordinator, Member, Placement,
                                               RendezvousError)
from hbcore.launcher.tf_config_launch import (  # noqa: E402
    rank_tf_config)
from hbcore.launcher.rank import wire  # noqa: E402

JOB = {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
       "command": ["python", "train.py"]}
MEMBERS = ["chief:0", "worker:0", "worker:1"]
LINE = ("HYDRA_LAUNCH: /venv/bin/hydra_pmi_proxy --control-port vm:41077 "
        "--rmk user --launcher manual --demux poll --pgid 0 --retries 10 "
        "--usize -1 --pmi-port 0 --gpus-per-proc -2 --gpu-subdevs-per-proc "
        "-2 --proxy-id 1 ")
TIMEOUT_S = 10


class Machine(threading.Thread):
    """One member joining in a thread; ``start_data`` or ``error`` after."""

    def __init__(self, port, name, workers=1, job=JOB, secret=b"",
                 devices=None, timeout=TIMEOUT_S):
        super().__init__(daemon=True)
        self.member = Member(name, workers, devices, job, secret,
                             ("127.0.0.1", port), timeout)
        self.start_data = self.error = self.end = None
        self.started = threading.Event()
        self.start()

    def run(self):
        try:
            self.start_data = self.member.join()
            self.started.set()
            self.end = self.member.wait_for_end(TIMEOUT_S)
        except RendezvousError as exc:
            self.error = str(exc)


def coordinator(timeout=TIMEOUT_S, failures=None, secret=b""):
    return Coordinator(MEMBERS, JOB, secret, ("127.0.0.1", 0), timeout,
                       describe=lambda m: "task " + m,
                       on_failure=(failures.append if failures is not None
                                   else None))


def proxies(placements):
    return {p.arrival.name: hydra_manual.ProxyData(
        4000 + i, [["--pgid", "0"], ["--proxy-id", str(i)]])
        for i, p in enumerate(placements)}


def test_members_form_one_world_in_member_order():
    coord = coordinator()
    # Arrive in another order than the members' with different counts.
    machines = [Machine(coord.port, "worker:1", 1),
                Machine(coord.port, "worker:0", 2, devices=["0", "1"]),
                Machine(coord.port, "chief:0", 3)]
    placements = coord.wait_for_members()
    assert [(p.arrival.name, p.first_rank, p.arrival.workers)
            for p in placements] == [("chief:0", 0, 3), ("worker:0", 3, 2),
                                     ("worker:1", 5, 1)]
    assert placements[1].arrival.devices == ["0", "1"]
    coord.start(proxies(placements), placements)
    coord.end(3, "rank 4 failed first")
    for machine in machines:
        machine.join(TIMEOUT_S)
    starts = {m.member._name: m.start_data for m in machines}
    assert starts["worker:0"].first_rank == 3
    assert starts["worker:0"].world_size == 6
    assert starts["worker:0"].proxy.proxy_id == 1
    assert starts["worker:1"].proxy.control_port == 4002
    assert [m.end for m in machines] == [(3, "rank 4 failed first")] * 3
    assert all(m.error is None for m in machines)


@pytest.mark.parametrize("second,message", [
    (dict(name="worker:0"), "task worker:0 was started twice: from "
     "127.0.0.1:"),
    (dict(name="worker:1", job=dict(JOB, cluster={"chief": ["a:1"],
                                                  "worker": ["b:1"]})),
     "task worker:1 (from 127.0.0.1:%d) describes another job than the "
     "coordinator: cluster['worker']: [\"b:1\", \"c:1\"] at the coordinator, "
     "[\"b:1\"] at task worker:1"),
    (dict(name="worker:1", job=dict(JOB, command=["python", "other.py"])),
     "command: [\"python\", \"train.py\"] at the coordinator, [\"python\", "
     "\"other.py\"] at task worker:1"),
    (dict(name="ps:0"), "'ps:0' (from 127.0.0.1:%d) is not a member of this "
     "job (members: task chief:0, task worker:0, task worker:1)"),
])
def test_a_wrong_arrival_ends_the_job_for_everyone(second, message):
    failures = []
    coord = coordinator(failures=failures)
    first = Machine(coord.port, "worker:0")
    wrong = Machine(coord.port, **second)
    with pytest.raises(RendezvousError) as raised:
        coord.wait_for_members()
    first.join(TIMEOUT_S)
    wrong.join(TIMEOUT_S)
    text = str(raised.value)
    if "%d" in message:
        port = int(text.split("(from 127.0.0.1:")[1].split(")")[0])
        message = message % port
    assert message in text
    assert first.error == text and wrong.error == text
    assert failures == [text]
    coord.close()


def test_a_missing_member_is_named_on_every_machine():
    coord = coordinator(timeout=1.5)
    machines = [Machine(coord.port, "chief:0"), Machine(coord.port,
                                                        "worker:1")]
    with pytest.raises(RendezvousError,
                       match=r"^task worker:0 did not arrive within "
                             r"--start-timeout 1.5s \(2 of 3 machines "
                             r"arrived\)$"):
        coord.wait_for_members()
    for machine in machines:
        machine.join(TIMEOUT_S)
        assert machine.error.startswith("task worker:0 did not arrive")
    coord.close()


def test_member_without_coordinator_gives_up_at_its_timeout():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    machine = Machine(port, "worker:0", timeout=0.5)
    machine.join(TIMEOUT_S)
    assert machine.error.startswith(
        "cannot reach the coordinator (the chief's launcher) at "
        "127.0.0.1:%d within --start-timeout 0.5s" % port)


def test_a_launcher_that_goes_away_ends_the_job():
    failures = []
    coord = coordinator(failures=failures)
    machines = [Machine(coord.port, name) for name in MEMBERS]
    placements = coord.wait_for_members()
    coord.start(proxies(placements), placements)
    assert all(m.started.wait(TIMEOUT_S) for m in machines)
    # Every member got its start and waits for the end, when
    machines[1].member.close()  # worker:0's launcher dies
    for machine in (machines[0], machines[2]):
        machine.join(TIMEOUT_S)
        assert machine.end[0] == 1
        assert "the launcher of task worker:0 (127.0.0.1:" in machine.end[1]
    assert len(failures) == 1 and "went away" in failures[0]
    coord.close()


def test_a_lost_coordinator_ends_its_member():
    # A coordinator that starts the member and then dies (its process gone:
    # the connection closes without an end message).
    def coordinator_that_dies(conn):
        assert conn.receive_message(TIMEOUT_S)["type"] == "hello"
        conn.send_message({"type": "start", "control_port": 4000,
                           "options": [["--proxy-id", "0"]],
                           "first_rank": 0, "world_size": 1})
        assert machine.started.wait(TIMEOUT_S)
        # Returning closes the connection: the peer sees the end.

    listener = wire.Listener(b"", CONTEXT, coordinator_that_dies)
    port = listener.port
    machine = Machine(port, "worker:0")
    machine.join(TIMEOUT_S)
    assert machine.end == (1, "lost the connection to the coordinator (the "
                           "chief's launcher) at 127.0.0.1:%d" % port)
    listener.close()


def test_a_peer_without_the_secret_is_refused_alone():
    failures = []
    coord = coordinator(failures=failures, secret=b"s3cret")
    stranger = Machine(coord.port, "worker:1", secret=b"guess",
                       job={"cluster": "other"})
    stranger.join(TIMEOUT_S)
    assert stranger.error == ("task worker:1 (from %s) does not know this "
                              "job's HB_RENDEZVOUS_SECRET"
                              % stranger.error.split("(from ")[1].split(")")[0])
    assert "train.py" not in stranger.error and failures == []
    machines = [Machine(coord.port, name, secret=b"s3cret")
                for name in MEMBERS]
    placements = coord.wait_for_members()
    assert [p.arrival.name for p in placements] == MEMBERS
    coord.start(proxies(placements), placements)
    coord.end(0, "")
    for machine in machines:
        machine.join(TIMEOUT_S)
        assert machine.end == (0, "")


@pytest.mark.parametrize("payload,message", [
    (b"not json", "sent a message that is not JSON"),
    (b'{"type": "hello"}', "where a hello message with fields"),
    (json.dumps({"type": "hello", "v": 1, "member": "worker:0",
                 "workers": 0, "devices": None, "job": JOB}).encode(),
     "a hello message with a bad workers: 0"),
    (json.dumps({"type": "hello", "v": 1, "member": "worker:0",
                 "workers": 1, "devices": ["0; rm -rf /"], "job": JOB}).encode(),
     "a hello message with a bad devices"),
    (json.dumps({"type": "hello", "v": 1, "member": "$(reboot)",
                 "workers": 1, "devices": None, "job": JOB}).encode(),
     "a hello message with a bad member"),
])
def test_malformed_hellos_are_refused_without_ending_the_job(payload,
                                                             message):
    failures = []
    coord = coordinator(failures=failures)
    conn = wire.connect(("127.0.0.1", coord.port), b"", CONTEXT,
                        name="worker:0", timeout=TIMEOUT_S)
    conn.send_bytes(payload)
    reply = conn.receive_message(TIMEOUT_S)
    assert reply["type"] == "error" and message in reply["message"]
    assert conn.receive_message(TIMEOUT_S) is None  # closed
    conn.close()
    assert failures == []
    # The job still forms.
    machines = [Machine(coord.port, name) for name in MEMBERS]
    placements = coord.wait_for_members()
    coord.start(proxies(placements), placements)
    coord.end(0, "")
    for machine in machines:
        machine.join(TIMEOUT_S)
        assert machine.end == (0, "")


# ------------------------------------------------------ hydra's lines

def test_launch_line_is_data_and_back():
    data = hydra_manual.parse_launch_line(LINE)
    assert data.control_port == 41077 and data.proxy_id == 1
    command = hydra_manual.proxy_command("/here/hydra_pmi_proxy",
                                         "10.0.0.1", data)
    assert command == ["/here/hydra_pmi_proxy", "--control-port",
                       "10.0.0.1:41077"] + LINE.split()[4:]
    assert hydra_manual.proxy_command("/p", "::1", data)[2] == "[::1]:41077"


@pytest.mark.parametrize("line,message", [
    (LINE.replace("--rmk user", "--exec-cmd sh"), "option --exec-cmd 'sh' "
     "is not one hbcore passes"),
    (LINE.replace("--launcher manual", "--launcher ssh"),
     "option --launcher 'ssh'"),
    (LINE.replace("hydra_pmi_proxy", "sh"), "unexpected manual-launch line"),
    (LINE.replace("--pgid 0", "--pgid '0;x'"), "option --pgid '0;x'"),
    (LINE.replace(" --proxy-id 1", ""), "no --proxy-id"),
])
def test_launch_lines_of_another_form_are_refused(line, message):
    with pytest.raises(LauncherError, match=message):
        hydra_manual.parse_launch_line(line)


@pytest.mark.parametrize("port,options,message", [
    (0, [["--proxy-id", "0"]], "control port 0 is not a port"),
    (True, [["--proxy-id", "0"]], "control port True"),
    (80, [["--proxy-id", "0"], ["--proxy-id", "1"]], "--proxy-id '1'"),
    (80, [["--proxy-id", "0", "x"]], "is not a \\[name, value\\] pair"),
    (80, "--proxy-id 0", "options must be a list"),
])
def test_proxy_data_from_a_peer_is_checked(port, options, message):
    with pytest.raises(LauncherError, match=message):
        hydra_manual.check_proxy_data(port, options)


# ------------------------------------------------ per-worker TF_CONFIG

def test_rank_tf_config_is_hybridbackends_rewrite():
    config = tf_config.parse(json.dumps({
        "cluster": {"chief": ["m0:2222"], "worker": ["m1:2222", "m2:2222"],
                    "ps": ["p0:1"]},
        "task": {"type": "worker", "index": 0}}))
    placements = [Placement(Arrival(name, n, None, ""), first)
                  for name, n, first in (("chief:0", 1, 0), ("worker:0", 2, 1),
                                         ("worker:1", 1, 3))]
    cluster = {"chief": ["m0:20001"],
               "worker": ["m1:20001", "m1:20002", "m2:20001"],
               "ps": ["p0:1"]}
    assert [rank_tf_config(config, placements, rank, 20001)
            for rank in range(4)] == [
        {"cluster": cluster, "task": {"type": "chief", "index": 0}}] + [
        {"cluster": cluster, "task": {"type": "worker", "index": i}}
        for i in range(3)]
    no_chief = tf_config.parse(json.dumps({
        "cluster": {"worker": ["m1:2222", "m2:2222"]},
        "task": {"type": "worker", "index": 1}}))
    placements = [Placement(Arrival("worker:0", 1, None, ""), 0),
                  Placement(Arrival("worker:1", 1, None, ""), 1)]
    assert rank_tf_config(no_chief, placements, 1, 7) == {
        "cluster": {"worker": ["m1:7", "m2:7"]},
        "task": {"type": "worker", "index": 1}}
