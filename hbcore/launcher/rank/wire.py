"""hbcore's one authenticated wire: framed messages between a job's own
processes, over TCP, after both sides proved they hold the job's key.

Users (paths under hbcore/launcher/): the rendezvous
(manual/rendezvous.py), the elastic host-change notice (elastic/notice.py),
hosted ranks and their rank servers (manual/hosted_rank.py,
rank/rank_server.py) and the tf.data compute service
(hbcore_tf/data/service/rpc.py). Standard library only: rank_server.py
runs by path on a rank and imports this file as its sibling.

Frames: an 8-byte big-endian length, then that many bytes. A frame over
the receiver's limit, or a stream that ends inside a frame, is a
WireError; the connection is then unusable and is closed. The receiver
reads a frame in chunks and holds only the bytes that arrived, so a
declared length (up to the limit) costs nothing by itself.

Handshake (each message one JSON frame of at most HANDSHAKE_MAX bytes).
The key is a job's secret (bytes, may be empty); proofs are HMAC-SHA256
keyed by a hash of it, over the protocol's ``context`` (so a proof for one
protocol is worthless for another), both nonces and the client's name:

1. Listener -> client: ``{"wire": 1, "nonce": 32 hex}``, a fresh nonce per
   connection (so a recorded proof is worthless on a new connection).
2. Client -> listener: ``{"nonce": 32 hex, "name": str, "proof": 64 hex}``:
   its own fresh nonce, the name it gives itself (for messages only,
   e.g. a rendezvous member's name) and its proof.
3. Listener: a wrong proof or a malformed message is answered with
   ``{"refused": text}`` (text from the listener's ``refusal``) and the
   connection closed; nothing else changes and the listener keeps serving.
   A right proof is answered with ``{"proof": 64 hex}``, the listener's own
   proof over the same values, so the client knows it reached its own
   job and not a stranger listening on the address.
4. Client: a refusal raises WireRefused with its text; a wrong listener
   proof raises WireRefused too.

Only then does either side hand the connection to its user. Nothing
received before that is interpreted beyond the checks above; after it, a
user reads JSON (``receive_message``) or, where a payload must be pickled
(a user's function and its results), bytes it unpickles only because the
peer has authenticated.
"""

import hashlib
import hmac
import json
import os
import re
import select
import socket
import struct
import threading
import time
from typing import Any, Callable, Optional, Tuple

VERSION = 1
HANDSHAKE_MAX = 4096
# Seconds a peer has for the whole handshake.
HANDSHAKE_TIMEOUT_S = 30.0
_HEADER = struct.Struct(">Q")
# The most one read of a frame asks the socket for.
_READ_CHUNK = 1 << 20
_NONCE = re.compile(r"^[0-9a-f]{32}$")
_PROOF = re.compile(r"^[0-9a-f]{64}$")
MAX_NAME = 128


class WireError(ConnectionError):
    """The peer broke the wire's protocol (a malformed, oversized or cut
    frame); the message names the peer."""


class WireRefused(WireError):
    """The handshake failed: one side does not hold the job's key."""


def _proof(key: bytes, role: str, context: str, listener_nonce: str,
           client_nonce: str, name: str) -> str:
    keyed = hashlib.sha256(b"hbcore-wire\0" + key).digest()
    text = "\0".join((role, context, listener_nonce, client_nonce, name))
    return hmac.new(keyed, text.encode(), hashlib.sha256).hexdigest()


def format_peer(address: Tuple[Any, ...]) -> str:
    """``host:port`` (``[host]:port`` for IPv6) of a socket address."""
    host = str(address[0])
    if host.startswith("::ffff:"):  # IPv4 on a dual-stack socket
        host = host[len("::ffff:"):]
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, address[1])


class Connection:
    """One end of an authenticated connection (after ``connect`` or a
    Listener's handshake). Sending is thread-safe; one reader at a time.

    Attributes:
        peer: The peer's ``host:port``, for messages.
        name: The name the client gave itself (listener side), else "".
    """

    def __init__(self, sock: socket.socket, peer: str, max_frame: int
                 ) -> None:
        self._sock = sock
        self.peer = peer
        self.name = ""
        self.max_frame = max_frame
        self._send_lock = threading.Lock()

    def fileno(self) -> int:
        """The socket's descriptor (for ``select``)."""
        return self._sock.fileno()

    def send_bytes(self, data: bytes) -> None:
        """Sends one frame.

        Raises:
            OSError: The connection is gone.
        """
        header = _HEADER.pack(len(data))
        with self._send_lock:
            if len(data) < 1 << 16:  # one segment (no copy of large data)
                self._sock.sendall(header + data)
            else:
                self._sock.sendall(header)
                self._sock.sendall(data)

    def send_message(self, message: Any) -> None:
        """Sends one JSON frame (``message`` JSON-serialisable)."""
        self.send_bytes(json.dumps(message, sort_keys=True).encode())

    def poll(self, timeout: float) -> bool:
        """Whether something (a frame or the end) can be read within
        ``timeout`` seconds (0: without waiting)."""
        return bool(select.select([self._sock], [], [], timeout)[0])

    def _read(self, size: int, deadline: Optional[float],
              started: bool) -> Optional[bytes]:
        # The socket stays blocking (senders on other threads must not see
        # a reader's timeout); a deadline is kept with select. The buffer
        # grows as bytes arrive: a frame's declared size (anything up to
        # max_frame) takes no memory before its bytes do.
        data = bytearray()
        while len(data) < size:
            if deadline is not None and not self.poll(
                    max(0.0, deadline - time.monotonic())):
                raise socket.timeout("timed out")
            try:
                chunk = self._sock.recv(min(size - len(data), _READ_CHUNK))
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                if not data and not started:
                    return None
                raise WireError("%s closed the connection inside a frame"
                                % self.peer)
            data += chunk
        return bytes(data)

    def receive_bytes(self, timeout: Optional[float] = None
                      ) -> Optional[bytes]:
        """Receives one frame.

        Args:
            timeout: Seconds to wait; None waits as long as it takes.

        Returns:
            The frame, or None when the peer closed the connection between
            frames.

        Raises:
            socket.timeout: No whole frame arrived in time.
            WireError: The frame is over ``max_frame`` or was cut off.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        header = self._read(_HEADER.size, deadline, False)
        if header is None:
            return None
        size = _HEADER.unpack(header)[0]
        if size > self.max_frame:
            raise WireError("%s sent a frame of %d bytes, over the limit of "
                            "%d" % (self.peer, size, self.max_frame))
        return self._read(size, deadline, True)

    def receive_message(self, timeout: Optional[float] = None) -> Any:
        """Receives one JSON frame (see receive_bytes).

        Raises:
            WireError: As receive_bytes, or the frame is not JSON.
        """
        data = self.receive_bytes(timeout)
        if data is None:
            return None
        try:
            return json.loads(data.decode())
        except (UnicodeDecodeError, ValueError):
            raise WireError("%s sent a message that is not JSON"
                            % self.peer) from None

    def shutdown(self) -> None:
        """Ends both directions without closing the descriptor: the peer,
        and a thread of ours blocked receiving, see the end at once."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        """Shuts the connection down and closes it."""
        self.shutdown()
        try:
            self._sock.close()
        except OSError:
            pass


def connect(address: Tuple[str, int], key: bytes, context: str,
            name: str = "", max_frame: int = HANDSHAKE_MAX,
            timeout: float = HANDSHAKE_TIMEOUT_S) -> Connection:
    """Connects to a Listener and runs the client's side of the handshake.

    Args:
        address: (host, port) of the listener.
        key: The job's key.
        context: The protocol's name; the listener's must be the same.
        name: What this client calls itself (printable, at most MAX_NAME
            characters), for the listener's messages.
        max_frame: The largest frame this end accepts after the handshake.
        timeout: Seconds for connecting and for the handshake.

    Returns:
        The authenticated connection.

    Raises:
        OSError: The listener cannot be reached (socket.timeout: in time).
        WireRefused: The listener refused this client's proof (the
            message is the listener's), or could not prove the key itself.
        WireError: The listener broke the protocol.
    """
    if len(name) > MAX_NAME or not name.isprintable():
        raise ValueError("wire name must be printable and at most %d "
                         "characters, got %r" % (MAX_NAME, name))
    sock = socket.create_connection(address, timeout=timeout)
    sock.settimeout(None)  # reads keep their deadlines with select
    conn = Connection(sock, format_peer(address), HANDSHAKE_MAX)
    try:
        deadline = time.monotonic() + timeout
        hello = conn.receive_message(timeout)
        if hello is None:
            raise WireError("%s closed the connection during the handshake"
                            % conn.peer)
        if not (isinstance(hello, dict) and hello.get("wire") == VERSION
                and isinstance(hello.get("nonce"), str)
                and _NONCE.match(hello["nonce"])):
            raise WireError("%s is not an hbcore wire listener of version %d"
                            % (conn.peer, VERSION))
        mine = os.urandom(16).hex()
        conn.send_message({"nonce": mine, "name": name, "proof": _proof(
            key, "client", context, hello["nonce"], mine, name)})
        answer = conn.receive_message(max(0.0, deadline - time.monotonic()))
        if answer is None:
            raise WireError("%s closed the connection during the handshake"
                            % conn.peer)
        if isinstance(answer, dict) and isinstance(answer.get("refused"),
                                                   str):
            raise WireRefused(printable(answer["refused"]))
        if not (isinstance(answer, dict) and isinstance(answer.get("proof"),
                                                        str)
                and hmac.compare_digest(answer["proof"], _proof(
                    key, "listener", context, hello["nonce"], mine, name))):
            raise WireRefused("%s does not know this job's key" % conn.peer)
    except BaseException:
        conn.close()
        raise
    conn.max_frame = max_frame
    return conn


def printable(text: str) -> str:
    """A text received from a peer, made printable (newlines kept) and
    bounded, for messages."""
    return "".join(c if c.isprintable() or c == "\n" else "?"
                   for c in text[:HANDSHAKE_MAX])


def _default_refusal(name: str, peer: str) -> str:
    return "%s (from %s) does not know this job's key" % (name or "a peer",
                                                          peer)


class Listener:
    """Accepts connections that pass the handshake and hands each one to
    ``handler`` in a thread of its own (the handshake runs there too, so a
    slow or hostile peer delays nobody else). Strangers are refused and
    closed; the listener keeps serving.

    Args:
        key: The job's key.
        context: The protocol's name; clients must use the same.
        handler: Called with each authenticated Connection; the listener
            closes the connection when it returns or raises.
        bind: (host, port); host "" listens on every interface, IPv6 too
            where the host has it; port 0 picks a free port.
        max_frame: The largest frame accepted after the handshake.
        refusal: (claimed name, peer) -> the text a refused client gets.

    Attributes:
        port: The port listened on.

    Raises:
        OSError: The address cannot be listened on.
    """

    def __init__(self, key: bytes, context: str,
                 handler: Callable[[Connection], None],
                 bind: Tuple[str, int] = ("127.0.0.1", 0),
                 max_frame: int = HANDSHAKE_MAX,
                 refusal: Callable[[str, str], str] = _default_refusal
                 ) -> None:
        self._key = key
        self._context = context
        self._handler = handler
        self._max_frame = max_frame
        self._refusal = refusal
        dual = bind[0] == "" and socket.has_dualstack_ipv6()
        self._server = socket.create_server(
            bind, family=socket.AF_INET6 if dual else socket.AF_INET,
            dualstack_ipv6=dual, backlog=128)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set = set()  # connections close() shuts down
        self._closed = False
        threading.Thread(target=self._accept, daemon=True,
                         name="wire-accept-" + context).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, address = self._server.accept()
            except OSError:
                return  # closed
            sock.settimeout(None)
            conn = Connection(sock, format_peer(address), HANDSHAKE_MAX)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="wire-" + conn.peer).start()

    def _serve(self, conn: Connection) -> None:
        try:
            if self._handshake(conn):
                conn.max_frame = self._max_frame
                self._handler(conn)
        except (OSError, socket.timeout):
            pass  # WireError is one: a broken peer ends its connection only
        finally:
            # Under the lock: close() only shuts open connections down, so
            # a descriptor is never closed twice (or after its reuse).
            with self._lock:
                self._open.discard(conn)
                conn.close()

    def _handshake(self, conn: Connection) -> bool:
        """Steps 1-3; True when the client proved the key."""
        mine = os.urandom(16).hex()
        conn.send_message({"wire": VERSION, "nonce": mine})
        try:
            hello = conn.receive_message(HANDSHAKE_TIMEOUT_S)
        except WireError as exc:
            conn.send_message({"refused": str(exc)})
            return False
        if hello is None:
            return False
        name = hello.get("name") if isinstance(hello, dict) else None
        if not (isinstance(name, str) and len(name) <= MAX_NAME
                and name.isprintable()
                and set(hello) == {"nonce", "name", "proof"}
                and isinstance(hello["nonce"], str)
                and _NONCE.match(hello["nonce"])
                and isinstance(hello["proof"], str)
                and _PROOF.match(hello["proof"])):
            conn.send_message({"refused": "%s sent a malformed handshake"
                                          % conn.peer})
            return False
        theirs = hello["nonce"]
        if not hmac.compare_digest(hello["proof"], _proof(
                self._key, "client", self._context, mine, theirs, name)):
            conn.send_message({"refused": self._refusal(name, conn.peer)})
            return False
        conn.send_message({"proof": _proof(self._key, "listener",
                                           self._context, mine, theirs,
                                           name)})
        conn.name = name
        return True

    def close(self) -> None:
        """Stops listening and closes every open connection (their
        handlers' receives end)."""
        try:
            self._server.close()
        except OSError:
            pass
        with self._lock:
            self._closed = True
            for conn in self._open:
                conn.shutdown()
