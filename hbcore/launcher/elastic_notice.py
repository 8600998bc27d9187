"""The host-change notice: from hbrun's elastic driver to the ranks, on
whatever host they run.

A file would reach only the ranks on the launch host, so the driver
serves the notice over TCP (the ranks can reach the launch host: hydra's
proxies connect back to it too).  Both sides import it.

Protocol: the driver listens on ``HB_ELASTIC_NOTICE`` (``host:port``)
and answers only its own job's ranks: it draws a secret per job and
gives it to the ranks in ``HB_ELASTIC_NOTICE_KEY`` (hex).  A rank
connects once per process; the driver sends a fresh nonce as one line
``<nonce>\\n``; the rank answers ``<g> <proof>\\n``, its generation and
the rendezvous proof of the secret over the nonce and
``elastic-notice/<g>`` (rendezvous.proof: an HMAC, so the secret never
travels).  A wrong proof is answered with the byte ``x`` and the
connection closed (no answer within CONNECT_TIMEOUT_S: closed
unanswered); otherwise the driver answers when it posts the host change
of generation g (at once if it was posted before), with the byte ``r``
when hosts were only removed, else ``1``, and closes.  The driver only ever sends those bytes: nothing a
peer sends is run or changes the job.  A rank polls its connection
without blocking (``select`` with timeout 0), so a check costs
microseconds and the driver never has to find the ranks.  Only rank 0 asks: every commit allreduces its answer
(hbcore/elastic/state.py).
"""

import hmac
import os
import select
import socket
import threading
from typing import Dict, Optional

from hbcore.launcher.rendezvous import proof

NOTICE_VAR = "HB_ELASTIC_NOTICE"
KEY_VAR = "HB_ELASTIC_NOTICE_KEY"
# What a rank learns (hosts_updated): no change yet; hosts were added (or
# added and removed); hosts were only removed (Horovod's skip_sync case).
NO_CHANGE, ADDED, REMOVED = 0, 1, 2
# The driver's answers: the change posted (ADDED, REMOVED); the proof was
# wrong.
_ANSWERS = {b"1": ADDED, b"r": REMOVED}
REFUSED = b"x"
# How long a rank waits to connect to the driver.
CONNECT_TIMEOUT_S = 30.0


class NoticeServer:
    """The driver's side: posts host changes per generation.

    Attributes:
        address: ``host:port`` for NOTICE_VAR.
        key: The job's secret, hex, for KEY_VAR.
    """

    def __init__(self) -> None:
        self._secret = os.urandom(32)
        self.key = self._secret.hex()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("", 0))
        self._sock.listen(64)
        # generation -> whether its changes so far only removed hosts
        self._posted: Dict[int, bool] = {}
        self._closed = False
        self._changed = threading.Condition()
        self.address = "%s:%d" % (socket.gethostname(),
                                  self._sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def post(self, generation: int, removed_only: bool = False) -> None:
        """Tells the ranks of ``generation`` that the hosts changed.

        Args:
            generation: The running generation.
            removed_only: The change only removed hosts or slots.
        """
        with self._changed:
            self._posted[generation] = removed_only and self._posted.get(
                generation, True)
            self._changed.notify_all()

    def close(self) -> None:
        """Stops serving; connections still open are closed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,),
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            nonce = os.urandom(16).hex()
            try:
                conn.settimeout(CONNECT_TIMEOUT_S)
                conn.sendall(b"%s\n" % nonce.encode())
                text, _, given = conn.makefile(
                    "r", errors="replace").readline(256).partition(" ")
                generation = int(text)
            except (OSError, ValueError):
                return
            if not hmac.compare_digest(given.strip(), _proof(
                    self._secret, nonce, generation)):
                try:
                    conn.sendall(REFUSED)  # not this job's rank
                except OSError:
                    pass
                return
            with self._changed:
                self._changed.wait_for(
                    lambda: self._closed or generation in self._posted)
                removed_only = self._posted.get(generation)
            if removed_only is not None:
                try:
                    conn.sendall(b"r" if removed_only else b"1")
                except OSError:
                    pass


def _proof(secret: bytes, nonce: str, generation: int) -> str:
    return proof(secret, nonce, "elastic-notice/%d" % generation)


# The rank's connection per (address, generation); once it is closed, the
# answer (ADDED, REMOVED or NO_CHANGE).
_CONNECTIONS: Dict[tuple, object] = {}


def hosts_updated(address: str, generation: int, key: str) -> int:
    """The rank's side: whether the driver posted this generation's host
    change (see the module comment).

    Args:
        address: ``HB_ELASTIC_NOTICE``.
        generation: This process's generation.
        key: ``HB_ELASTIC_NOTICE_KEY``.

    Returns:
        NO_CHANGE until the change is posted, then ADDED or REMOVED.

    Raises:
        OSError: If the driver cannot be reached or closed the connection
            unanswered (a wrong key).
    """
    where = (address, generation)
    conn: Optional[object] = _CONNECTIONS.get(where)
    if isinstance(conn, int):
        return conn
    if conn is None:
        host, _, port = address.rpartition(":")
        conn = socket.create_connection((host, int(port)),
                                        timeout=CONNECT_TIMEOUT_S)
        nonce = conn.makefile("r").readline().strip()
        conn.sendall(b"%d %s\n" % (generation, _proof(
            bytes.fromhex(key), nonce, generation).encode()))
        _CONNECTIONS[where] = conn
    assert isinstance(conn, socket.socket)
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return NO_CHANGE
    answer = conn.recv(1)
    conn.close()
    if answer == REFUSED:
        del _CONNECTIONS[where]
        raise OSError("hbcore.elastic: the driver at %s refused this rank's "
                      "proof of %s" % (address, KEY_VAR))
    # b"": the driver closed at the job's end, no change will come.
    _CONNECTIONS[where] = _ANSWERS.get(answer, NO_CHANGE)
    return _CONNECTIONS[where]
