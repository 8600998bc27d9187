"""Removes an elastic job's store on a host once its driver is gone.

hbrun's elastic driver removes the store (HB_ELASTIC_STORE, in
``/dev/shm``: memory) when the job ends, but a driver killed by SIGKILL
removes nothing, and the driver can only reach its own host's store
anyway: the ranks on other hosts make theirs.  A week-long job restarted
a few times would fill ``/dev/shm``.  So every rank wrapper of an
elastic job starts a *keeper* on its host (``start_keeper``), which
outlives the wrapper and, once the driver is gone, removes the store root
on that host, the last of the job's processes there to let it go:
- after a kill -9 of hbrun, the driver is gone when the wrappers end
  (the job watchdog ends them);
- at the job's end, the rank finished (its finished marker,
  elastic_protocol.py, is there), so its keeper watches the driver
  (elastic/notice.py: the driver tells it when the job ends and waits for
  it), up to ``JOB_END_WAIT_S``, then removes the store too.
After any other end of a rank (a re-formation) the driver lives on, and
the keeper leaves at once.

Who may remove, and when (the invariants):
1. Only once this job's driver is gone.  After its wrapper ended, the
   keeper connects to the driver's host-change notice server
   (HB_ELASTIC_NOTICE) with the job's key (HB_ELASTIC_NOTICE_KEY) over
   the authenticated wire.  The driver is alive when the handshake
   proves the key: then the store is kept (the next generation needs
   it).  It is gone when nothing listens there (connection refused) or
   what listens does not know the key (another process took the port).
   When the driver cannot be reached at all (a timeout, no route) the
   keeper cannot tell, and keeps the store.
2. Only when no process of the job on this host uses it any more.  A
   wrapper holds a shared ``flock`` on the store root from before its
   rank starts; the rank inherits the descriptor, so the lock lasts until
   both are gone.  The keeper removes the root only while it holds the
   exclusive lock, which it gets once every wrapper and rank of the job
   on this host has ended (it retries for ``LAST_WAIT_S``).  Of several
   keepers (one per slot) the first to get it removes; the others then
   find the root gone.
3. Only the directory this job used.  The keeper opens the root when its
   wrapper starts and holds that descriptor: it removes the path only if
   the path still names that directory, so a new job's store made later
   under the same name is never touched.
Jobs without HB_ELASTIC_STORE (not elastic), or without the notice
variables (nothing to ask whether the driver lives), start no keeper.

Why a process of its own: after a kill -9 of hbrun, the job watchdog
stops mpiexec's process group and hydra stops the proxies, which kill
the wrappers (SIGKILL, sometimes before a wrapper has run any code after
its rank ended), and a wrapper's death kills its rank.  The keeper is
forked from the wrapper before the rank starts (no threads yet), leaves
the wrapper's session and process group, and closes every descriptor it
inherited but its own (above all hydra's output pipes and PMI socket,
which would otherwise keep hydra waiting for it).  It waits on a pipe
whose other end only the wrapper holds: end of file is the wrapper's end.

Linux only (``fork``, ``flock``, ``/proc/self/fd``); elsewhere no keeper
starts.  Standard library only: the wrapper runs this by file path
(rank_wrapper.py).
"""

import os
import socket
import time
from typing import Any, Mapping, Optional, Tuple

if __package__:
    from hbcore.launcher.rank.elastic_protocol import (KEY_VAR, NOTICE_CONTEXT,
                                                       NOTICE_VAR, STORE_VAR)
else:  # run by path (rank_wrapper.py)
    from elastic_protocol import (KEY_VAR, NOTICE_CONTEXT,  # type: ignore
                                  NOTICE_VAR, STORE_VAR)

# Seconds a keeper waits for the driver's handshake.
PROBE_TIMEOUT_S = 5.0
# Seconds a keeper of a finished rank waits for the driver to end.
JOB_END_WAIT_S = 60.0
# Seconds a keeper waits for the job's other processes on its host to end
# once the driver is gone (a rank in state D ends only when its I/O does).
LAST_WAIT_S = 30.0
# How often it tries the exclusive lock meanwhile.
_LOCK_POLL_S = 0.05


def _wire():
    """wire.py, imported only where a keeper asks the driver: every rank
    wrapper imports this module, and its start is on the path of every
    rank's (and every re-formation's) start."""
    if __package__:
        from hbcore.launcher.rank import wire
    else:  # run by path (rank_wrapper.py)
        import wire  # type: ignore
    return wire


def _connect(address: str, key: str,
             timeout: float) -> Tuple[Optional[bool], Any]:
    """Connects to the driver's notice server (invariant 1).

    Returns:
        ``(alive, connection)``: True and the connection when the driver
        proved the job's key; False when nothing listens at ``address``
        or what listens does not know the key; None when that cannot be
        told (the host cannot be reached in time).
    """
    wire = _wire()
    host, _, port = address.rpartition(":")
    try:
        return True, wire.connect((host, int(port)), bytes.fromhex(key),
                                  NOTICE_CONTEXT, timeout=timeout)
    except (ConnectionRefusedError, wire.WireError):
        return False, None
    except (OSError, ValueError):
        return None, None


def driver_alive(address: str, key: str,
                 timeout: float = PROBE_TIMEOUT_S) -> Optional[bool]:
    """Whether the elastic driver of a job still runs (invariant 1).

    Args:
        address: HB_ELASTIC_NOTICE, ``host:port``.
        key: HB_ELASTIC_NOTICE_KEY, hex.
        timeout: Seconds for the connection and the handshake.

    Returns:
        True when the driver proved the job's key, False when nothing
        listens at ``address`` or what listens does not know the key,
        None when that cannot be told (the host cannot be reached in
        time).
    """
    alive, conn = _connect(address, key, timeout)
    if conn is not None:
        # The driver's side reads no request and ends the connection.
        conn.close()
    return alive


def watch_driver(address: str, key: str, timeout: float = JOB_END_WAIT_S
                 ) -> Tuple[Optional[bool], Any]:
    """Waits for the end of a job whose driver still runs (a finished
    rank's keeper; elastic/notice.py).

    Args:
        address: HB_ELASTIC_NOTICE, ``host:port``.
        key: HB_ELASTIC_NOTICE_KEY, hex.
        timeout: Longest wait, in seconds.

    Returns:
        ``(ended, connection)``: ``ended`` True when the driver is gone or
        said the job ended, None when that cannot be told in time; the
        connection (or None) is to stay open until the caller is done: the
        driver waits for its end.
    """
    alive, conn = _connect(address, key, PROBE_TIMEOUT_S)
    if conn is None:
        return (None if alive is None else True), None
    try:
        conn.send_message({"watch": True})
        conn.receive_message(timeout)  # {"end": true}, or None: it is gone
    except socket.timeout:
        conn.close()
        return None, None
    except OSError:
        pass  # the driver went away
    return True, conn


def _lock():
    """fcntl, where there is one (not on Windows)."""
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


def start_keeper(environ: Mapping[str, str] = os.environ,
                 finished: Optional[str] = None) -> Optional[int]:
    """Starts this wrapper's keeper and takes the wrapper's shared lock
    (the module comment).  Call it once, before the rank starts and
    before the wrapper starts threads.

    Args:
        environ: The rank's environment (the elastic driver's variables).
        finished: The rank's finished marker, or None.

    Returns:
        The keeper's process id, or None when none was started.
    """
    store = environ.get(STORE_VAR)
    address = environ.get(NOTICE_VAR)
    key = environ.get(KEY_VAR)
    fcntl = _lock()
    if not (store and address and key) or fcntl is None or not hasattr(
            os, "fork") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        os.makedirs(store, mode=0o700, exist_ok=True)
        # Invariant 2: held by the wrapper, inherited by its rank.
        shared = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(shared, fcntl.LOCK_SH)
        os.set_inheritable(shared, True)
        # Invariant 3: the directory this job uses, held by the keeper.
        own = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
        ended, held_open = os.pipe()
        pid = os.fork()
    except OSError:
        return None  # no keeper: the store stays, as without one
    if pid != 0:
        os.close(own)
        os.close(ended)
        # The wrapper holds ``held_open`` (not inherited) until it ends.
        return pid
    try:
        _detach(keep=(own, ended))
        _keep(store, address, key, own, ended, fcntl, finished)
    finally:
        os._exit(0)


def _detach(keep) -> None:
    """The keeper's first step: its own session; stdin, stdout and stderr
    on /dev/null; every other inherited descriptor closed."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed already


def _keep(store: str, address: str, key: str, own: int, ended: int,
          fcntl, finished: Optional[str]) -> None:
    """Waits for the wrapper's end, then removes the store if the driver
    is gone and this is the job's last process on the host."""
    while os.read(ended, 1):
        pass
    if finished is not None and os.path.exists(finished):
        gone, watching = watch_driver(address, key)
    else:
        gone, watching = driver_alive(address, key) is False, None
    try:
        if gone:
            _remove_when_last(store, own, fcntl)
    finally:
        if watching is not None:
            watching.close()  # the driver waits for this (notice.py)


def _remove_when_last(store: str, own: int, fcntl) -> None:
    """Removes the store once this keeper holds its exclusive lock
    (invariant 2), if the path still names ``own`` (invariant 3)."""
    deadline = time.monotonic() + LAST_WAIT_S
    while True:
        try:
            fcntl.flock(own, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return
            time.sleep(_LOCK_POLL_S)
    try:
        same = os.path.samestat(os.stat(store), os.fstat(own))
    except FileNotFoundError:
        return  # another keeper removed it
    if same:
        import shutil
        shutil.rmtree(store, ignore_errors=True)
