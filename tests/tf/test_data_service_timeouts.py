"""The compute service's client never blocks forever: a host that accepts
the connection but never answers (a stopped process, a half-open TCP
connection) ends a call with ConnectionError after the client's timeout,
and the readers' watchdog then stops the training process instead of
hanging in its ping.
"""
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from support.data_service import base_env, call_in_thread
from support.tf_launch import tensorflow_missing

pytestmark = pytest.mark.skipif(tensorflow_missing() is not None,
                                reason=str(tensorflow_missing()))

# Hard limit on any one call in these tests (a hang is a failure).
GUARD_S = 30.0


@pytest.fixture
def mute_listener():
    """A TCP listener that never accepts: connects succeed (the kernel's
    backlog), nothing is ever answered."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield "127.0.0.1:%d" % sock.getsockname()[1]
    sock.close()


def test_client_timeout_must_be_positive():
    from hbcore_tf.data.service.rpc import ComputeServiceClient
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="timeout must be a positive"):
            ComputeServiceClient("127.0.0.1:1", "k", timeout=bad)


def test_call_to_a_host_that_never_answers_times_out(mute_listener):
    from hbcore_tf.data.service.rpc import ComputeServiceClient
    client = ComputeServiceClient(mute_listener, "key", timeout=0.5)
    start = time.monotonic()
    with pytest.raises(ConnectionError) as info:
        call_in_thread(lambda: client.call("ping"), GUARD_S)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert mute_listener in message, message
    assert "did not answer within 0.5 s" in message, message
    # The handshake's first read waited for the timeout, not forever.
    assert 0.4 <= elapsed < GUARD_S, elapsed


def test_server_that_stops_answering_mid_session():
    """One round trip answered, the next one never: the call raises after
    the timeout, and the client's next call connects anew (the dropped
    connection was mid-message) and is answered."""
    from hbcore_tf.data.service.rpc import (CONTEXT, ComputeServiceClient,
                                            new_key)
    # After hbcore_tf: the wire under test.
    from hbcore.launcher.rank import wire
    key = new_key()
    release = threading.Event()
    connections = []

    def serve(conn):
        # Connection 1: answer one request, then read one and hold it.
        # Connection 2: answer every request.
        connections.append(conn)
        if len(connections) == 1:
            conn.send_message(["pong", conn.receive_message()])
            conn.receive_message()
            release.wait(GUARD_S)
            return
        while not release.is_set():
            request = conn.receive_message()
            if request is None:
                return
            conn.send_message(["pong", request])

    listener = wire.Listener(key.encode(), CONTEXT, serve)
    address = "127.0.0.1:%d" % listener.port
    client = ComputeServiceClient(address, key, timeout=0.5)
    try:
        assert call_in_thread(lambda: client.call("a"),
                              GUARD_S) == ["pong", ["a"]]
        with pytest.raises(ConnectionError, match="did not answer within"):
            call_in_thread(lambda: client.call("b"), GUARD_S)
        assert call_in_thread(lambda: client.call("c"),
                              GUARD_S) == ["pong", ["c"]]
    finally:
        release.set()
        client.close()
        listener.close()
    assert len(connections) == 2



def test_watchdog_stops_the_process_when_pings_go_unanswered(mute_listener,
                                                            tmp_path):
    """The readers' watchdog pinged without a timeout, so a compute host
    that stopped answering blocked it forever (and the training process
    hung inside the tf.data service op). Now two unanswered pings end the
    process with status 1 and say why."""
    script = textwrap.dedent("""
        import sys, threading
        from hbcore_tf.data.service import client as cs
        cs.WATCH_INTERVAL_S = 0.1
        cs.WATCH_TIMEOUT_S = 0.5
        config = cs.TfDataServiceConfig(1, 1, "compute", [sys.argv[1]], "k")
        cs._Watchdog.watch(config)
        # The watchdog exits the process; this wait only bounds the test.
        threading.Event().wait(%s)
        print("watchdog did not stop the process")
    """ % GUARD_S)
    # Run from tmp_path with the launch environment (base_env: hbcore as
    # the tests import it), never from the checkout, whose unbuilt
    # packages would shadow an installed hbcore.
    proc = subprocess.run([sys.executable, "-c", script, mute_listener],
                          env=base_env(), cwd=str(tmp_path),
                          capture_output=True, text=True,
                          timeout=GUARD_S + 60)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "did not answer within 0.5 s" in proc.stderr, proc.stderr
    assert "stopping this training process" in proc.stderr, proc.stderr
    assert "did not stop" not in proc.stdout
