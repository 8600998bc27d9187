"""The host-change notice: from hbrun's elastic driver to the ranks, on
whatever host they run.

A file would reach only the ranks on the launch host, so the driver
serves the notice over TCP (the ranks can reach the launch host: hydra's
proxies connect back to it too).  Standard library only: both sides
import it.

Protocol: the driver listens on ``HB_ELASTIC_NOTICE`` (``host:port``).
A rank connects once per process and sends its generation as one line
``<g>\\n``; the driver answers with the single byte ``1`` when it posts
the host change of generation g (at once if it was posted before), and
closes.  A rank polls its connection without blocking (``select`` with
timeout 0), so a check costs microseconds and the driver never has to
find the ranks.  Only rank 0 asks: every commit allreduces its answer
(hbcore/elastic/state.py).
"""

import select
import socket
import threading
from typing import Dict, Optional, Set

NOTICE_VAR = "HB_ELASTIC_NOTICE"
# How long a rank waits to connect to the driver.
CONNECT_TIMEOUT_S = 30.0


class NoticeServer:
    """The driver's side: posts host changes per generation."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("", 0))
        self._sock.listen(64)
        self._posted: Set[int] = set()
        self._closed = False
        self._changed = threading.Condition()
        self.address = "%s:%d" % (socket.gethostname(),
                                  self._sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def post(self, generation: int) -> None:
        """Tells the ranks of ``generation`` that the hosts changed."""
        with self._changed:
            self._posted.add(generation)
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
            try:
                conn.settimeout(CONNECT_TIMEOUT_S)
                generation = int(conn.makefile("r").readline())
            except (OSError, ValueError):
                return
            with self._changed:
                self._changed.wait_for(
                    lambda: self._closed or generation in self._posted)
                posted = generation in self._posted
            if posted:
                try:
                    conn.sendall(b"1")
                except OSError:
                    pass


# The rank's connection per (address, generation); True once answered.
_CONNECTIONS: Dict[tuple, object] = {}


def hosts_updated(address: str, generation: int) -> bool:
    """The rank's side: whether the driver posted this generation's host
    change (see the module comment).

    Args:
        address: ``HB_ELASTIC_NOTICE``.
        generation: This process's generation.

    Returns:
        True once the change is posted.

    Raises:
        OSError: If the driver cannot be reached.
    """
    key = (address, generation)
    conn: Optional[object] = _CONNECTIONS.get(key)
    if conn is True:
        return True
    if conn is None:
        host, _, port = address.rpartition(":")
        conn = socket.create_connection((host, int(port)),
                                        timeout=CONNECT_TIMEOUT_S)
        conn.sendall(b"%d\n" % generation)
        _CONNECTIONS[key] = conn
    assert isinstance(conn, socket.socket)
    readable, _, _ = select.select([conn], [], [], 0)
    if readable and conn.recv(1) == b"1":
        conn.close()
        _CONNECTIONS[key] = True
        return True
    return False
