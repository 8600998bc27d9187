"""The rendezvous: launchers started by someone else become one MPI world.

Kubernetes (TFJob), PAI, Spark and Ray start one launcher per machine (or
per task) themselves; hbcore cannot ssh anywhere. Each launcher knows the
job's member names in rank order, its own name, how many workers it runs
and the address of the coordinator (one member's launcher, the chief's).
This module turns that into one MPI world, built by hydra like every other
hbcore job: the coordinator runs ``mpiexec -launcher manual`` and every
member starts the proxy that mpiexec waits for on its own machine
(hydra_manual.py). Front ends: ../tf_config_launch.py (TF_CONFIG machines);
Spark tasks and Ray actors are meant to be more of them.

Protocol (hbcore's authenticated wire, wire.py, context ``rendezvous``,
keyed with the shared secret ``HB_RENDEZVOUS_SECRET``, which may be
empty; each message one JSON frame, an object with a ``type``, at most
64 KiB; one connection per member for the whole job):

1. The coordinator listens on its address. Each member connects,
   retrying until ``start_timeout`` has passed since it started.
2. Both run the wire's handshake, the member naming itself by its member
   name, so each proves the secret to the other. A peer without it is
   refused there with ``<member> (from <address>) does not know this
   job's HB_RENDEZVOUS_SECRET`` and its connection closed; nothing else
   changes, so a stranger can neither end the job nor learn what it runs.
   A member refuses a coordinator without the secret the same way.
3. Member -> coordinator: ``hello`` ``{"v", "member", "workers",
   "devices", "job"}``: its name (the one it proved), its worker count
   (1..1024), one device string per worker or null, and the job
   description that every member must agree on (for TF_CONFIG: the
   cluster, the command, the Python and wrapper paths).
4. The coordinator checks every field strictly. A malformed message gets
   an ``error`` ``{"message"}`` and its connection is closed; nothing else
   changes. A peer that proved the secret and then describes another job
   (named key by key), a name that is not a member, or a name that
   arrived already (a machine started twice) ends the whole job: every
   connected member gets the ``error`` and every launcher exits with it.
5. When every member has arrived, members are placed in member order with
   consecutive ranks. If some have not arrived ``start_timeout`` seconds
   after the coordinator started, every connected member gets an
   ``error`` naming the missing ones.
6. The coordinator starts mpiexec and sends each member ``start``
   ``{"control_port", "options", "first_rank", "world_size"}``: data only
   (hydra_manual.ProxyData, validated again by the member), from which the
   member builds and starts its proxy itself, never a command line.
7. The job runs. When it ends (every rank done, or the first failure,
   which the coordinator's supervisor sees on any machine), every member
   gets ``end`` ``{"code", "message"}``: each launcher stops what is left
   of its proxy and exits with that code and message. A member whose
   connection drops before ``end`` (its launcher died) ends the job as a
   failure naming it; a member whose coordinator disappears stops its
   proxy and exits non-zero naming the coordinator.

Nothing received is ever executed: messages carry names, numbers and
strings that are checked against what they may be.
"""

import json
import re
import socket
import threading
import time
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Tuple)

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.manual.hydra_manual import ProxyData, check_proxy_data
from hbcore.launcher.rank import wire

PROTOCOL = 1
CONTEXT = "rendezvous"
MAX_MESSAGE = 1 << 16
MAX_WORKERS = 1024
# Seconds between a member's connection attempts while the coordinator is
# not listening yet (machines start in any order).
CONNECT_RETRY_S = 0.2
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_DEVICE = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")


class RendezvousError(LauncherError):
    """The rendezvous failed; the message says why, naming the member."""


class _Refused(RendezvousError):
    """A hello that ends the whole job (step 4), not just its connection."""


class Arrival(NamedTuple):
    """What a member said about itself (validated).

    Attributes:
        name: Its member name.
        workers: How many ranks it runs.
        devices: One device string per worker (CUDA_VISIBLE_DEVICES), or
            None.
        peer: ``host:port`` its connection came from (for messages).
    """
    name: str
    workers: int
    devices: Optional[List[str]]
    peer: str


class Placement(NamedTuple):
    """A member's place in the world: ranks first_rank .. +workers-1."""
    arrival: Arrival
    first_rank: int


class Start(NamedTuple):
    """What a member receives to start its proxy."""
    proxy: ProxyData
    first_rank: int
    world_size: int


class Channel:
    """One member's connection: JSON messages with a ``type``.

    Args:
        conn: An authenticated wire connection.
    """

    def __init__(self, conn: wire.Connection) -> None:
        self.conn = conn
        self.peer = conn.peer

    def send(self, message: Mapping[str, Any]) -> None:
        """Sends one message; a peer that is gone is ignored (its own end
        of the protocol reports it)."""
        try:
            self.conn.send_message(message)
        except OSError:
            pass

    def receive(self, timeout: Optional[float]) -> Optional[Dict[str, Any]]:
        """Receives one message.

        Args:
            timeout: Seconds to wait; None waits as long as it takes.

        Returns:
            The message, or None when the peer closed the connection.

        Raises:
            socket.timeout: Nothing complete arrived in time.
            RendezvousError: The peer sent something that is not a message.
        """
        try:
            message = self.conn.receive_message(timeout)
        except wire.WireError as exc:
            raise RendezvousError(str(exc)) from None
        if message is None:
            return None
        if not isinstance(message, dict) or not isinstance(
                message.get("type"), str):
            raise RendezvousError("%s sent a message without a type"
                                  % self.peer)
        return message

    def close(self) -> None:
        """Closes the connection (the peer sees its end at once, and so
        does a thread of ours blocked receiving on it)."""
        self.conn.close()


def _fields(message: Mapping[str, Any], kind: str,
            checks: Mapping[str, Callable[[Any], bool]], peer: str
            ) -> Dict[str, Any]:
    """Checks that a message is of ``kind`` with exactly these fields, each
    passing its check; returns it."""
    if message.get("type") == "error" and kind != "error":
        raise RendezvousError(_text(message.get("message")))
    if message.get("type") != kind or set(message) != set(checks) | {"type"}:
        raise RendezvousError("%s sent %r where a %s message with fields %s "
                              "was expected" % (peer, sorted(message), kind,
                                                ", ".join(sorted(checks))))
    for name, check in checks.items():
        if not check(message[name]):
            raise RendezvousError("%s sent a %s message with a bad %s: %r"
                                  % (peer, kind, name, message[name]))
    return dict(message)


def _text(value: Any) -> str:
    """A message text received from a peer, printable and bounded."""
    if not isinstance(value, str):
        return "(a peer sent an error without a message)"
    return wire.printable(value)


def _is_int(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: (isinstance(v, int) and not isinstance(v, bool)
                      and low <= v <= high)


def _is_devices(value: Any) -> bool:
    return value is None or (isinstance(value, list) and all(
        isinstance(d, str) and _DEVICE.match(d) for d in value))


def describe_difference(mine: Mapping[str, Any], theirs: Any,
                        who: str) -> str:
    """Names what differs between two job descriptions, key by key.

    Args:
        mine: The coordinator's description.
        theirs: The member's.
        who: The member, e.g. ``"task worker:1"``.

    Returns:
        E.g. ``"cluster['worker']: ['a:1'] at the chief, ['a:1', 'b:1'] at
        task worker:1"``.
    """
    if not isinstance(theirs, dict):
        return "%s sent no job description" % who
    parts = []
    for key in sorted(set(mine) | set(theirs)):
        a, b = mine.get(key), theirs.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    parts.append("%s[%r]: %s at the coordinator, %s at %s"
                                 % (key, sub, json.dumps(a.get(sub)),
                                    json.dumps(b.get(sub)), who))
        else:
            parts.append("%s: %s at the coordinator, %s at %s"
                         % (key, json.dumps(a), json.dumps(b), who))
    return "; ".join(parts)


class Coordinator:
    """The coordinator's side (steps 1-7). Thread-safe.

    Args:
        members: Member names in rank order.
        job: The description every member must send (JSON-serialisable).
        secret: The shared secret (may be empty).
        bind: (host, port) to listen on; host "" listens on every
            interface.
        start_timeout: Seconds, from now, for every member to arrive.
        describe: Turns a member name into words for messages (default:
            the name).
        on_failure: Called once (from a connection's thread) with the
            message when the job must end early: a member's launcher went
            away after the start, or the rendezvous failed.

    Raises:
        RendezvousError: The address cannot be listened on.
    """

    def __init__(self, members: List[str], job: Mapping[str, Any],
                 secret: bytes, bind: Tuple[str, int], start_timeout: float,
                 describe: Callable[[str], str] = str,
                 on_failure: Optional[Callable[[str], None]] = None) -> None:
        if len(set(members)) != len(members) or not members:
            raise ValueError("members must be distinct names: %r" % members)
        self._members = list(members)
        self._job = dict(job)
        self._secret = secret
        self._describe = describe
        self._on_failure = on_failure
        self._deadline = time.monotonic() + start_timeout
        self._start_timeout = start_timeout
        self._cond = threading.Condition()
        self._arrived: Dict[str, Tuple[Channel, Arrival]] = {}
        self._error: Optional[str] = None
        self._reported = False  # _error was sent to every member
        self._ended = False
        # Every interface, IPv6 as well where the host has it (a TF_CONFIG
        # may name the chief by an IPv6 address).
        try:
            self._listener = wire.Listener(
                secret, CONTEXT, lambda conn: self._serve(Channel(conn)),
                bind=bind, max_frame=MAX_MESSAGE, refusal=self._refusal)
        except OSError as exc:
            raise RendezvousError("cannot listen on %s:%d for the other "
                                  "machines: %s" % (bind[0] or "*", bind[1],
                                                    exc.strerror or exc))
        # The port listened on (useful when bind asked for port 0).
        self.port = self._listener.port

    # -- steps 1-4: arrivals -------------------------------------------
    def _who(self, name: str) -> str:
        """A member name a peer sent, in words for messages."""
        return self._describe(name) if name in self._members else repr(name)

    def _refusal(self, name: str, peer: str) -> str:
        # Only this peer is refused: a stranger must not be able to end
        # the job, nor learn what it runs.
        return "%s (from %s) does not know this job's HB_RENDEZVOUS_SECRET" \
            % (self._who(name), peer)

    def _serve(self, channel: Channel) -> None:
        try:
            arrival = self._greet(channel)
        except RendezvousError as exc:
            # The peer hears why first: _fail may end this process soon.
            channel.send({"type": "error", "message": str(exc)})
            channel.close()
            if isinstance(exc, _Refused):
                self._fail(str(exc))
            return
        except (OSError, socket.timeout):
            channel.close()
            return
        if arrival is not None:
            self._watch(channel, arrival)

    def _greet(self, channel: Channel) -> Optional[Arrival]:
        message = channel.receive(max(0.0, self._deadline - time.monotonic()))
        if message is None:
            return None
        if message.get("type") == "hello" and message.get("v", PROTOCOL) \
                != PROTOCOL:
            raise RendezvousError("%s speaks rendezvous protocol %r, this "
                                  "coordinator %d (different hbcore "
                                  "versions?)" % (channel.peer,
                                                  message.get("v"), PROTOCOL))
        hello = _fields(message, "hello", {
            "v": lambda v: v == PROTOCOL,
            "member": lambda v: isinstance(v, str) and bool(_NAME.match(v)),
            "workers": _is_int(1, MAX_WORKERS),
            "devices": _is_devices,
            "job": lambda v: isinstance(v, dict),
        }, channel.peer)
        name = hello["member"]
        who = self._who(name)
        if name != channel.conn.name:
            raise RendezvousError("%s (from %s) proved the name %r"
                                  % (who, channel.peer, channel.conn.name))
        if hello["devices"] is not None and \
                len(hello["devices"]) != hello["workers"]:
            raise RendezvousError("%s sent %d devices for %d workers"
                                  % (who, len(hello["devices"]),
                                     hello["workers"]))
        if hello["job"] != self._job:
            raise _Refused("%s (from %s) describes another job than the "
                           "coordinator: %s" % (who, channel.peer,
                                                describe_difference(
                                                    self._job, hello["job"],
                                                    who)))
        if name not in self._members:
            raise _Refused("%s (from %s) is not a member of this job "
                           "(members: %s)" % (who, channel.peer, ", ".join(
                               self._describe(m) for m in self._members)))
        arrival = Arrival(name, hello["workers"], hello["devices"],
                          channel.peer)
        with self._cond:
            first = self._arrived.get(name)
            error = self._error
            if first is None and error is None:
                self._arrived[name] = (channel, arrival)
                self._cond.notify_all()
                return arrival
        if error is not None:
            raise RendezvousError(error)
        raise _Refused("%s was started twice: from %s and from %s"
                       % (who, first[1].peer, channel.peer))

    def _watch(self, channel: Channel, arrival: Arrival) -> None:
        """Reads the member's connection until it closes (step 7)."""
        try:
            while channel.receive(None) is not None:
                pass  # members send nothing after hello
        except (RendezvousError, OSError):
            pass
        with self._cond:
            ended = self._ended
        if not ended:
            self._fail("the launcher of %s (%s) went away"
                       % (self._describe(arrival.name), arrival.peer))

    def _fail(self, message: str) -> None:
        with self._cond:
            if self._error is not None or self._ended:
                return
            self._error = message
            channels = [c for c, _ in self._arrived.values()]
        for channel in channels:
            channel.send({"type": "error", "message": message})
        if self._on_failure is not None:
            self._on_failure(message)
        # Last, so whoever waits for the members sees a failure that was
        # already reported everywhere.
        with self._cond:
            self._reported = True
            self._cond.notify_all()

    def abort(self, message: str) -> None:
        """Ends the job from the coordinator's side before or during the
        start (its orchestrator gave up): every member that arrived gets
        the ``error``, and wait_for_members raises it."""
        self._fail(message)

    # -- step 5: placement ---------------------------------------------
    def wait_for_members(self) -> List[Placement]:
        """Waits until every member arrived (step 5).

        Returns:
            The members' placements, in member order.

        Raises:
            RendezvousError: A member did not arrive in time (the message
                names the missing ones), or the rendezvous failed.
        """
        with self._cond:
            while not self._reported and \
                    len(self._arrived) < len(self._members):
                left = self._deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            error = self._error
            missing = [m for m in self._members if m not in self._arrived]
        if error is not None:
            raise RendezvousError(error)
        if missing:
            message = ("%s did not arrive within --start-timeout %gs (%d of "
                       "%d machines arrived)"
                       % (", ".join(self._describe(m) for m in missing),
                          self._start_timeout,
                          len(self._members) - len(missing),
                          len(self._members)))
            self._fail(message)
            raise RendezvousError(message)
        placements, rank = [], 0
        for name in self._members:
            arrival = self._arrived[name][1]
            placements.append(Placement(arrival, rank))
            rank += arrival.workers
        return placements

    # -- steps 6-7 -----------------------------------------------------
    def start(self, proxies: Mapping[str, ProxyData],
              placements: List[Placement]) -> None:
        """Sends every member its proxy data (step 6).

        Args:
            proxies: Member name -> its proxy's data.
            placements: From wait_for_members.
        """
        world = sum(p.arrival.workers for p in placements)
        for placement in placements:
            name = placement.arrival.name
            data = proxies[name]
            with self._cond:
                channel = self._arrived[name][0]
            channel.send({"type": "start", "control_port": data.control_port,
                          "options": data.options,
                          "first_rank": placement.first_rank,
                          "world_size": world})

    def end(self, code: int, message: str) -> None:
        """Tells every member the job's outcome and closes (step 7).

        Args:
            code: The job's exit code (0..255).
            message: The line each launcher prints ("" for none).
        """
        with self._cond:
            self._ended = True
            channels = [c for c, _ in self._arrived.values()]
        for channel in channels:
            channel.send({"type": "end", "code": int(code) & 255,
                          "message": message})
        self.close()

    def close(self) -> None:
        """Stops listening (members' connections close with the process)."""
        self._listener.close()


class Member:
    """A member's side (steps 1-3, 6, 7).

    Args:
        name: This member's name.
        workers: How many ranks it runs.
        devices: One device string per worker, or None.
        job: The job description (must equal the coordinator's).
        secret: The shared secret.
        coordinator: (host, port) of the coordinator.
        start_timeout: Seconds, from now, to reach the coordinator.
    """

    def __init__(self, name: str, workers: int,
                 devices: Optional[List[str]], job: Mapping[str, Any],
                 secret: bytes, coordinator: Tuple[str, int],
                 start_timeout: float) -> None:
        self._name = name
        self._workers = workers
        self._devices = devices
        self._job = dict(job)
        self._secret = secret
        self._coordinator = coordinator
        self._deadline = time.monotonic() + start_timeout
        self._start_timeout = start_timeout
        self._channel: Optional[Channel] = None

    @property
    def where(self) -> str:
        """The coordinator's address, for messages."""
        host, port = self._coordinator
        return "%s:%d" % (host, port)

    def _connect(self) -> Channel:
        while True:
            try:
                return Channel(wire.connect(
                    self._coordinator, self._secret, CONTEXT,
                    name=self._name, max_frame=MAX_MESSAGE,
                    timeout=max(5.0, self._deadline - time.monotonic())))
            except wire.WireError as exc:  # a refusal, or not a coordinator
                raise RendezvousError(str(exc)) from None
            except OSError as exc:
                if time.monotonic() + CONNECT_RETRY_S > self._deadline:
                    raise RendezvousError(
                        "cannot reach the coordinator (the chief's launcher) "
                        "at %s within --start-timeout %gs: %s"
                        % (self.where, self._start_timeout,
                           exc.strerror or exc)) from None
                time.sleep(CONNECT_RETRY_S)

    def join(self) -> Start:
        """Connects, introduces itself and waits for the start (steps 1-6).

        Returns:
            The start data (already validated).

        Raises:
            RendezvousError: The coordinator refused this member or the
                job, or cannot be reached; the message says why.
        """
        channel = self._connect()
        self._channel = channel
        try:
            channel.send({"type": "hello", "v": PROTOCOL,
                          "member": self._name, "workers": self._workers,
                          "devices": self._devices, "job": self._job})
            # The coordinator answers once every member arrived or its own
            # start timeout passed; it started no later than this member
            # could reach it, so twice the timeout bounds a hung one.
            message = channel.receive(self._start_timeout * 2 + 30)
        except socket.timeout:
            raise RendezvousError("the coordinator at %s did not start the "
                                  "job in time" % self.where) from None
        if message is None:
            raise RendezvousError("the coordinator at %s closed the "
                                  "connection before the start" % self.where)
        if message.get("type") == "end":  # mpiexec could not be started
            raise RendezvousError(_text(message.get("message")))
        start = _fields(message, "start", {
            "control_port": lambda v: True, "options": lambda v: True,
            "first_rank": _is_int(0, 1 << 20),
            "world_size": _is_int(1, 1 << 20),
        }, self.where)
        try:
            proxy = check_proxy_data(start["control_port"], start["options"])
        except LauncherError as exc:
            raise RendezvousError("the coordinator at %s sent bad %s"
                                  % (self.where, exc)) from None
        return Start(proxy, start["first_rank"], start["world_size"])

    def wait_for_end(self, timeout: Optional[float]
                     ) -> Optional[Tuple[int, str]]:
        """Waits for the job's outcome (step 7).

        Args:
            timeout: Seconds to wait; None waits as long as it takes.

        Returns:
            (exit code, message) from the coordinator; (1, why) when the
            coordinator went away or failed the job; None on timeout.
        """
        assert self._channel is not None
        try:
            message = self._channel.receive(timeout)
        except socket.timeout:
            return None
        except (RendezvousError, OSError) as exc:
            return 1, str(exc)
        if message is None:
            return 1, ("lost the connection to the coordinator (the chief's "
                       "launcher) at %s" % self.where)
        try:
            end = _fields(message, "end", {"code": _is_int(0, 255),
                                           "message": lambda v: True},
                          self.where)
        except RendezvousError as exc:
            return 1, str(exc)
        return end["code"], _text(end["message"])

    def close(self) -> None:
        """Closes the connection."""
        if self._channel is not None:
            self._channel.close()
