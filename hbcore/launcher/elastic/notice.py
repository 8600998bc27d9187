"""The host-change notice: from hbrun's elastic driver to the ranks, on
whatever host they run.

A file would reach only the ranks on the launch host, so the driver
serves the notice over TCP (the ranks can reach the launch host: hydra's
proxies connect back to it too).  Both sides import it.

Protocol (over the authenticated wire, wire.py, context
``elastic-notice``): the driver listens on ``HB_ELASTIC_NOTICE``
(``host:port``) and answers only its own job's ranks: it draws a secret
per job and gives it to the ranks in ``HB_ELASTIC_NOTICE_KEY`` (hex),
the wire's key. A rank connects once per process and sends
``{"generation": g}``; the driver answers when it posts the host change
of generation g (at once if it was posted before) with
``{"change": "removed"}`` when hosts were only removed, else
``{"change": "added"}``, and closes (at the job's end: closes
unanswered). A peer without the key is refused by the wire. The driver
only ever sends those answers: nothing a peer sends is run or changes the
job. A rank polls its connection without blocking, so a check costs
microseconds and the driver never has to find the ranks. Only rank 0
asks: every commit allreduces its answer (hbcore/elastic/state.py).

The rank wrappers' store keepers (rank/store_keeper.py) connect too: one
that sends nothing and closes asks only whether the driver lives (the
handshake proves it). One whose rank finished sends ``{"watch": true}``:
the driver answers ``{"end": true}`` when the job ends (``close``) and
then waits, at most WATCH_END_S, for each such keeper to close its end,
which it does once it removed its host's store; so when the driver
returns, no keeper it heard of is left.
"""

import os
import socket
import threading
from typing import Dict, Optional

from hbcore.launcher.rank import wire
# The variables live with the rank side's (the store keeper asks this
# server too); the driver and the ranks import them from here.
from hbcore.launcher.rank.elastic_protocol import (  # noqa: F401
    KEY_VAR, NOTICE_CONTEXT, NOTICE_VAR)
# What a rank learns (hosts_updated): no change yet; hosts were added (or
# added and removed); hosts were only removed (Horovod's skip_sync case).
NO_CHANGE, ADDED, REMOVED = 0, 1, 2
# The driver's answers.
_ANSWERS = {"added": ADDED, "removed": REMOVED}
CONTEXT = NOTICE_CONTEXT
# How long a rank waits to connect to the driver.
CONNECT_TIMEOUT_S = 30.0
# How long the driver's end waits for the watching keepers to finish.
WATCH_END_S = 5.0


class NoticeServer:
    """The driver's side: posts host changes per generation.

    Attributes:
        address: ``host:port`` for NOTICE_VAR.
        key: The job's secret, hex, for KEY_VAR.
    """

    def __init__(self) -> None:
        self._secret = os.urandom(32)
        self.key = self._secret.hex()
        # generation -> whether its changes so far only removed hosts
        self._posted: Dict[int, bool] = {}
        self._closed = False
        self._watchers = 0
        self._changed = threading.Condition()
        self._listener = wire.Listener(self._secret, CONTEXT, self._serve,
                                       bind=("", 0))
        self.address = "%s:%d" % (socket.gethostname(), self._listener.port)

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
        """Stops serving, after the watching keepers finished (at most
        WATCH_END_S); connections still open are closed."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._watchers == 0,
                                   timeout=WATCH_END_S)
        self._listener.close()

    def _watch(self, conn: wire.Connection) -> None:
        """A keeper's watch: the job's end, then its own end."""
        with self._changed:
            self._watchers += 1
            self._changed.wait_for(lambda: self._closed)
        try:
            conn.send_message({"end": True})
            conn.receive_message(WATCH_END_S)  # None: the keeper's end
        except OSError:
            pass  # it ended otherwise (socket.timeout is an OSError)
        finally:
            with self._changed:
                self._watchers -= 1
                self._changed.notify_all()

    def _serve(self, conn: wire.Connection) -> None:
        """One rank's connection (already authenticated)."""
        request = conn.receive_message(CONNECT_TIMEOUT_S)
        if isinstance(request, dict) and request.get("watch") is True:
            self._watch(conn)
            return
        generation = request.get("generation") if isinstance(
            request, dict) else None
        if not isinstance(generation, int) or isinstance(generation, bool):
            return
        with self._changed:
            self._changed.wait_for(
                lambda: self._closed or generation in self._posted)
            removed_only = self._posted.get(generation)
        if removed_only is not None:
            conn.send_message({"change": "removed" if removed_only
                               else "added"})


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
        try:
            conn = wire.connect((host, int(port)), bytes.fromhex(key),
                                CONTEXT, timeout=CONNECT_TIMEOUT_S)
        except wire.WireRefused:
            raise OSError("hbcore.elastic: the driver at %s refused this "
                          "rank's proof of %s" % (address, KEY_VAR)) from None
        conn.send_message({"generation": generation})
        _CONNECTIONS[where] = conn
    assert isinstance(conn, wire.Connection)
    if not conn.poll(0):
        return NO_CHANGE
    try:
        answer = conn.receive_message(CONNECT_TIMEOUT_S)
    finally:
        conn.close()
    # None: the driver closed at the job's end, no change will come.
    change = answer.get("change") if isinstance(answer, dict) else None
    _CONNECTIONS[where] = _ANSWERS.get(change, NO_CHANGE)
    return _CONNECTIONS[where]
