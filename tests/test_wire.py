"""hbcore's authenticated wire (hbcore/launcher/rank/wire.py) on its own: a
Listener and its clients as threads of this process on 127.0.0.1. Every
hostile peer is followed by a good one, which the listener must still
serve. The wire's users (rendezvous, elastic notice, hosted ranks, the
tf.data service) test only their own protocols on top of it."""
import json
import os
import socket
import struct
import threading
import tracemalloc

import pytest

from support.hbcore_path import import_hbcore_package
from support.waiting import wait_until

import_hbcore_package()
from hbcore.launcher.rank import wire  # noqa: E402

KEY = b"job-key"
CONTEXT = "test-wire"
TIMEOUT_S = 10


class EchoListener:
    """A Listener whose handler echoes JSON messages, recording the name
    each authenticated client gave."""

    def __init__(self, key=KEY, max_frame=1024):
        self.names = []
        self.listener = wire.Listener(key, CONTEXT, self._echo,
                                      max_frame=max_frame)
        self.address = ("127.0.0.1", self.listener.port)

    def _echo(self, conn):
        self.names.append(conn.name)
        while True:
            message = conn.receive_message(TIMEOUT_S)
            if message is None:
                return
            conn.send_message({"echo": message})

    def assert_serves_a_good_peer(self):
        conn = wire.connect(self.address, KEY, CONTEXT, name="good",
                            timeout=TIMEOUT_S)
        try:
            conn.send_message([1, "two"])
            assert conn.receive_message(TIMEOUT_S) == {"echo": [1, "two"]}
        finally:
            conn.close()


@pytest.fixture
def echo():
    server = EchoListener()
    yield server
    server.listener.close()


def raw_send(sock, data):
    sock.sendall(struct.pack(">Q", len(data)) + data)


def raw_receive(sock):
    reader = sock.makefile("rb")
    size = struct.unpack(">Q", reader.read(8))[0]
    return json.loads(reader.read(size))


def fake_listener(answer):
    """Connects to a made-up listener that sends a hello, reads the
    client's proof and then sends ``answer`` (a message; None: closes)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        def serve():
            sock, _ = server.accept()
            with sock:
                raw_send(sock, json.dumps({"wire": 1, "nonce": "ab" * 16})
                         .encode())
                raw_receive(sock)
                if answer is not None:
                    raw_send(sock, json.dumps(answer).encode())
                    sock.recv(1)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            wire.connect(server.getsockname(), KEY, CONTEXT,
                         timeout=TIMEOUT_S)
        finally:
            thread.join(TIMEOUT_S)


def test_a_good_peer_is_served_and_named(echo):
    echo.assert_serves_a_good_peer()
    assert echo.names == ["good"]


def test_a_stranger_is_refused_and_the_listener_keeps_serving(echo):
    with pytest.raises(wire.WireRefused, match=r"^stranger \(from "
                       r"127\.0\.0\.1:\d+\) does not know this job's key$"):
        wire.connect(echo.address, b"guess", CONTEXT, name="stranger",
                     timeout=TIMEOUT_S)
    # The same key for another protocol is no proof either.
    with pytest.raises(wire.WireRefused, match="does not know this job's"):
        wire.connect(echo.address, KEY, "another-protocol",
                     timeout=TIMEOUT_S)
    echo.assert_serves_a_good_peer()
    assert echo.names == ["good"]


def test_a_client_refuses_a_listener_without_the_key():
    impostor = EchoListener(key=b"other")
    try:
        # The impostor refuses the client first; a listener that accepted
        # any proof would still fail the client's check of its own proof.
        with pytest.raises(wire.WireRefused):
            wire.connect(impostor.address, KEY, CONTEXT, timeout=TIMEOUT_S)
    finally:
        impostor.listener.close()
    # A listener that answers any proof with a made-up one.
    with pytest.raises(wire.WireRefused, match=r"^127\.0\.0\.1:\d+ does not "
                       r"know this job's key$"):
        fake_listener({"proof": "0" * 64})


def test_a_silent_peer_delays_nobody(echo):
    # A connection that never answers the listener's hello: the handshake
    # of each connection runs on its own thread.
    with socket.create_connection(echo.address, timeout=TIMEOUT_S):
        echo.assert_serves_a_good_peer()


def test_a_listener_that_closes_mid_handshake_is_named():
    with pytest.raises(wire.WireError, match=r"^127\.0\.0\.1:\d+ closed "
                       "the connection during the handshake$"):
        fake_listener(None)


def test_a_replayed_handshake_is_refused(echo):
    # A good handshake, recorded.
    with socket.create_connection(echo.address, timeout=TIMEOUT_S) as sock:
        nonce = raw_receive(sock)["nonce"]
        mine = "cd" * 16
        recorded = json.dumps({"nonce": mine, "name": "rec", "proof":
                               wire._proof(KEY, "client", CONTEXT, nonce,
                                           mine, "rec")}).encode()
        raw_send(sock, recorded)
        assert set(raw_receive(sock)) == {"proof"}
    # Replayed on a new connection (a fresh listener nonce).
    with socket.create_connection(echo.address, timeout=TIMEOUT_S) as sock:
        raw_receive(sock)
        raw_send(sock, recorded)
        assert raw_receive(sock) == {"refused": "rec (from %s) does not know "
                                     "this job's key" % wire.format_peer(
                                         sock.getsockname())}
        assert sock.recv(1) == b""  # closed
    echo.assert_serves_a_good_peer()


@pytest.mark.parametrize("frame,reason", [
    (b"not json", "sent a message that is not JSON"),
    (b'{"nonce": "ab", "name": "x", "proof": "00"}',
     "sent a malformed handshake"),
    (b'{"nonce": "%s", "name": "x\\u0007", "proof": "%s"}'
     % (b"ab" * 16, b"0" * 64), "sent a malformed handshake"),
])
def test_a_malformed_handshake_is_refused(echo, frame, reason):
    with socket.create_connection(echo.address, timeout=TIMEOUT_S) as sock:
        raw_receive(sock)
        raw_send(sock, frame)
        assert reason in raw_receive(sock)["refused"]
        assert sock.recv(1) == b""
    echo.assert_serves_a_good_peer()


def test_oversized_frames_are_refused_before_and_after_the_handshake(echo):
    with socket.create_connection(echo.address, timeout=TIMEOUT_S) as sock:
        raw_receive(sock)
        sock.sendall(struct.pack(">Q", 1 << 40))  # no body needed
        assert raw_receive(sock)["refused"].endswith(
            "sent a frame of %d bytes, over the limit of %d"
            % (1 << 40, wire.HANDSHAKE_MAX))
    # After the handshake the listener's own limit holds (1024 here):
    # the connection ends, nothing of the frame is read.
    conn = wire.connect(echo.address, KEY, CONTEXT, timeout=TIMEOUT_S)
    conn.send_bytes(b"x" * 1025)
    assert conn.receive_bytes(TIMEOUT_S) is None
    conn.close()
    # And a client's limit holds for what it receives.
    conn = wire.connect(echo.address, KEY, CONTEXT, max_frame=8,
                        timeout=TIMEOUT_S)
    conn.send_message("a longer text")
    with pytest.raises(wire.WireError, match="over the limit of 8"):
        conn.receive_message(TIMEOUT_S)
    conn.close()
    echo.assert_serves_a_good_peer()


def test_a_cut_frame_and_a_silent_peer():
    got = []

    def handler(conn):
        try:
            conn.receive_bytes(TIMEOUT_S)
        except wire.WireError as exc:
            got.append(str(exc))

    listener = wire.Listener(KEY, CONTEXT, handler)
    try:
        conn = wire.connect(("127.0.0.1", listener.port), KEY, CONTEXT,
                            timeout=TIMEOUT_S)
        conn._sock.sendall(struct.pack(">Q", 100) + b"short")
        conn.close()
        wait_until(lambda: got, TIMEOUT_S, what="the handler's error")
        with pytest.raises(socket.timeout):
            silent = wire.connect(("127.0.0.1", listener.port), KEY,
                                  CONTEXT, timeout=TIMEOUT_S)
            silent.receive_bytes(0.2)
        silent.close()
    finally:
        listener.close()
    assert len(got) == 1 and got[0].endswith(
        "closed the connection inside a frame")


def test_a_frame_takes_memory_as_its_bytes_arrive():
    """A peer may declare a frame up to the receiver's limit and send
    less: the receiver holds what arrived, not the declared size (256 MiB
    here against a 1 GiB limit). A frame of several reads arrives whole."""
    declared, sent = 256 << 20, 3 << 20
    body = os.urandom(sent + 1)
    ours, peer = socket.socketpair()
    conn = wire.Connection(ours, "peer", max_frame=1 << 30)

    def send():
        peer.sendall(struct.pack(">Q", len(body)) + body)
        peer.sendall(struct.pack(">Q", declared) + body[:sent])
        peer.close()

    sender = threading.Thread(target=send)
    sender.start()
    try:
        assert conn.receive_bytes(TIMEOUT_S) == body
        tracemalloc.start()
        with pytest.raises(wire.WireError, match="inside a frame"):
            conn.receive_bytes(TIMEOUT_S)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sender.join(TIMEOUT_S)
        conn.close()
    assert peak < 4 * sent, peak


def test_close_ends_the_handlers_of_open_connections(echo):
    conn = wire.connect(echo.address, KEY, CONTEXT, timeout=TIMEOUT_S)
    echo.listener.close()
    assert conn.receive_bytes(TIMEOUT_S) is None  # the listener's end
    conn.close()
    with pytest.raises(OSError):
        wire.connect(echo.address, KEY, CONTEXT, timeout=TIMEOUT_S)
