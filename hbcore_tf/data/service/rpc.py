"""The compute service: a small request/response server run by rank 0 of a
tf.data service compute job, and its client.

Why it exists: the training job and the compute job are two separate MPI
jobs, so they cannot use hbcore's collectives with each other. They meet
through this service, whose address and authentication key the compute
job writes into the config file (TfDataServiceConfig).

Protocol (hbcore's authenticated wire, hbcore/launcher/rank/wire.py, context
``tf-data-service``, keyed with the config file's key; every message one
JSON frame, so nothing a peer sends is ever unpickled): one request (a
list), one reply, per round trip.

    ("register_dispatcher", id, address)  -> True, or the address that
                                             id already has when another
                                             one is registered under it
    ("wait_dispatcher", id, seconds)      -> address, or None after seconds
    ("register_worker", id[, worker_id])  -> True (a worker_id counts
                                             once; none: a new worker)
    ("wait_workers", id, n, seconds)      -> True once n workers of that
                                             dispatcher registered, else
                                             False after seconds
    ("wait_shutdown", seconds)            -> True once shutdown was asked,
                                             False when seconds passed first
    ("shutdown",)                         -> True; every wait_shutdown returns
                                             (the training job asks)
    ("shutdown", False)                   -> the same, from a compute rank
                                             stopping on a signal
    ("ping",)                             -> True, or False once the
                                             training job asked to stop
    ("job_name", index, rank)             -> the tf.data job name of the
                                             index-th shared dataset that
                                             training rank sent; a rank
                                             asking for the same index
                                             again (a later training job,
                                             or the same one starting
                                             over) starts a new name

The server answers each connection in its own thread; waits are on one
condition variable, never busy, and none is longer than the seconds its
request names (clients ask for at most a second at a time). A client that
cannot reach the server raises ConnectionError naming the address (the
compute job is gone), and so does a round trip that takes longer than the
client's timeout: a host that accepts the connection but never answers (a
stopped process, a half-open TCP connection) ends a call instead of
blocking it forever.
"""
import secrets
import socket
import threading
import time
from typing import Any, Dict, Optional, Tuple

from hbcore.launcher.rank import wire

CONTEXT = "tf-data-service"
# The largest request or reply (they are a few names and numbers).
MAX_MESSAGE = 1 << 16


def advertised_host() -> str:
    """This host's name if it resolves, else 127.0.0.1."""
    name = socket.gethostname()
    try:
        socket.gethostbyname(name)
        return name
    except OSError:
        return "127.0.0.1"


def new_key() -> str:
    return secrets.token_hex(16)


# Seconds a client waits for one round trip beyond what the request asks
# the server to wait (at most MAX_SERVER_WAIT_S): connecting, the key
# handshake, sending the request and reading the reply must all fit in it.
# The server answers in microseconds; only a stopped or unreachable host
# takes this long.
RPC_TIMEOUT_S = 30.0
MAX_SERVER_WAIT_S = 1.0


class ComputeServiceServer:
    """The server (compute job, rank 0). ``address`` is host:port."""

    def __init__(self, key: str) -> None:
        self.key = key
        # The wire authenticates each connection on its own thread, so a
        # client with a wrong key, or one that never answers, delays
        # nobody else.
        self._listener = wire.Listener(key.encode(), CONTEXT, self._serve,
                                       bind=("0.0.0.0", 0),
                                       max_frame=MAX_MESSAGE)
        self.address = "%s:%d" % (advertised_host(), self._listener.port)
        self._cond = threading.Condition()
        self._dispatchers: Dict[int, str] = {}
        self._workers: Dict[int, set] = {}
        self._anonymous_workers = 0
        self._shutdown = False
        self._stop_asked_by_training = False
        # index -> (generation, ranks that got this generation's name)
        self._job_names: Dict[int, Tuple[int, set]] = {}

    @property
    def shutdown_requested(self) -> bool:
        with self._cond:
            return self._shutdown

    def wait_shutdown(self, seconds: Optional[float]) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._shutdown, seconds)

    def request_shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stops answering: the listener and every open connection close
        (clients then get ConnectionError, as when the process is gone)."""
        self.request_shutdown()
        self._listener.close()

    def _serve(self, conn: wire.Connection) -> None:
        """One authenticated client's requests, until it leaves or close()
        ends the connection."""
        while True:
            request = conn.receive_message()
            if request is None:
                return
            conn.send_message(self._answer(request))

    def _answer(self, request: Any) -> Any:
        if not isinstance(request, list) or not request:
            raise ValueError("a compute service request is a non-empty "
                             "list, got %r" % (request,))
        kind = request[0]
        with self._cond:
            if kind == "register_dispatcher":
                key, address = int(request[1]), str(request[2])
                known = self._dispatchers.get(key)
                if known is not None and known != address:
                    # Its workers serve the first one: a second dispatcher
                    # would get none, and its readers would wait forever.
                    return known
                self._dispatchers[key] = address
                self._cond.notify_all()
                return True
            if kind == "wait_dispatcher":
                key = int(request[1])
                self._cond.wait_for(lambda: key in self._dispatchers,
                                    float(request[2]))
                return self._dispatchers.get(key)
            if kind == "register_worker":
                key = int(request[1])
                worker = request[2] if len(request) > 2 else None
                if worker is None:
                    self._anonymous_workers += 1
                    worker = ("anonymous", self._anonymous_workers)
                self._workers.setdefault(key, set()).add(worker)
                self._cond.notify_all()
                return True
            if kind == "wait_workers":
                key, count = int(request[1]), int(request[2])
                return self._cond.wait_for(
                    lambda: len(self._workers.get(key, ())) >= count,
                    float(request[3]))
            if kind == "wait_shutdown":
                return self._cond.wait_for(lambda: self._shutdown,
                                           float(request[1]))
            if kind == "shutdown":
                self._shutdown = True
                # ("shutdown", False): a compute rank stopping on a signal,
                # not the training job's request.
                if len(request) < 2 or request[1]:
                    self._stop_asked_by_training = True
                self._cond.notify_all()
                return True
            if kind == "job_name":
                index, rank = int(request[1]), int(request[2])
                generation, ranks = self._job_names.get(index, (0, set()))
                if rank in ranks:  # this rank's second dataset of index
                    generation, ranks = generation + 1, set()
                ranks.add(rank)
                self._job_names[index] = (generation, ranks)
                return "hbcore_data_service_%d_%d" % (index, generation)
            if kind == "ping":
                # False once the training job asked the compute job to
                # stop: its readers' watchdogs then stand down (an ending
                # compute job is not a lost one).
                return not self._stop_asked_by_training
        raise ValueError("unknown compute service request %r" % (kind,))


class ComputeServiceClient:
    """A connection to the compute service (thread-safe).

    Args:
      address: the service's "host:port".
      key: the authentication key of the config file.
      verbose: print what ``wait_for`` waits for, once a second.
      timeout: seconds one round trip may go without progress (beyond the
        server-side wait a request asks for) before the call raises
        ConnectionError.
    """

    def __init__(self, address: str, key: str, verbose: bool = False,
                 timeout: float = RPC_TIMEOUT_S) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds, "
                             "got %r" % (timeout,))
        self.address = address
        self._key = key
        self._verbose = verbose
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        self._conn: Optional[wire.Connection] = None

    def call(self, *request: Any) -> Any:
        """One round trip.

        Raises:
          ConnectionError: the service cannot be reached (the compute job
            is not running any more), it did not answer within the
            client's timeout, or it refused the key (a stale config file).
        """
        with self._lock:
            try:
                if self._conn is None:
                    host, port = self.address.rsplit(":", 1)
                    self._conn = wire.connect(
                        (host, int(port)), self._key.encode(), CONTEXT,
                        max_frame=MAX_MESSAGE, timeout=self._timeout)
                self._conn.send_message(list(request))
                reply = self._conn.receive_message(self._timeout
                                                   + MAX_SERVER_WAIT_S)
                if reply is None:
                    raise EOFError("the service closed the connection")
                return reply
            except socket.timeout as exc:
                # The connection is mid-message now: drop it.
                self._drop()
                raise ConnectionError(
                    "the tf.data service compute job's service at %s did "
                    "not answer within %g s: is the compute job's process "
                    "stopped, or its host unreachable?" % (
                        self.address, self._timeout)) from exc
            except wire.WireRefused as exc:
                self._drop()
                raise ConnectionError(
                    "the tf.data service compute job's service at %s refused "
                    "this config file's key (%s): the config file is stale or "
                    "from another compute job; restart the training job once "
                    "the compute job has written it anew" % (
                        self.address, exc)) from exc
            except (OSError, EOFError) as exc:
                self._drop()
                raise ConnectionError(
                    "the tf.data service compute job's service at %s cannot "
                    "be reached (%s): is the compute job still running?" % (
                        self.address, exc)) from exc

    def wait_for(self, request: Tuple[Any, ...], what: str,
                 timeout: Optional[float]) -> Any:
        """Repeats a waiting request (its last element is the seconds the
        server may wait) until it gives a true reply; TimeoutError after
        ``timeout`` seconds (None: forever). Each round trip waits at most
        a second on the server, so a compute job that dies is noticed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 1.0 if deadline is None else min(
                1.0, max(0.0, deadline - time.monotonic()))
            reply = self.call(*(request + (left,)))
            if reply:
                return reply
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("timed out after %ss waiting for %s" % (
                    timeout, what))
            if self._verbose:
                print("hbcore: waiting for %s" % what, flush=True)

    def _drop(self) -> None:
        """Closes the connection after a failed round trip (caller holds
        the lock); the next call connects anew."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()
