"""Where an elastic job may run: a fixed host list or a discovery script,
minus the blacklisted hosts.

A discovery script (horovodrun's ``--host-discovery-script``) is any
executable that prints the hosts available now, one per line, as
``host:slots`` or ``host`` (then ``--slots-per-host`` slots, default 1);
blank lines and ``#`` comments are ignored.  Its answer may change at any
time; hbrun runs it at start and about once a second while the job runs.
A script that exits non-zero, runs longer than ``DISCOVERY_TIMEOUT_S``,
or prints a line that is not a host is an error that ends the job (with
the script's output in the message): guessing at a broken answer could
start ranks where none should run, or wait forever for hosts that never
come.

The blacklist: a host on which a rank failed is not used for
``cooldown(n)`` seconds after its n-th failure; with no
``--blacklist-cooldown-range`` that is forever (horovodrun's default).
With ``MIN MAX`` it is ``min(MAX, MIN * 2**(n-1))``, so a host that keeps
failing is tried less and less often.
"""

import subprocess
import time
from typing import Dict, List, Optional, Sequence, Tuple

from hbcore.launcher.errors import LauncherError
from hbcore.launcher.hosts import Host, _host

# Longest a discovery script may run.
DISCOVERY_TIMEOUT_S = 30.0


def parse_discovery_output(text: str, default_slots: int,
                           script: str) -> List[Host]:
    """Parses what a discovery script printed.

    Args:
        text: Its stdout.
        default_slots: Slots of a host printed without ``:slots``.
        script: The script (for messages).

    Returns:
        The hosts in the order printed (a repeated host keeps its first
        place and its last slot count).

    Raises:
        LauncherError: Naming the script and the bad line.
    """
    hosts: Dict[str, Host] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, slots = line.rpartition(":")
        if not sep:
            name, slots = line, str(default_slots)
        try:
            host = _host(name, slots, "line %d" % number)
        except ValueError as exc:
            raise LauncherError(
                "--host-discovery-script %s printed %r, which is not "
                "'host' or 'host:slots': %s" % (script, raw, exc)) from None
        hosts[host.name] = host
    return list(hosts.values())


def run_discovery_script(script: str, default_slots: int) -> List[Host]:
    """Runs the discovery script once.

    Args:
        script: Its command line (run by the shell, as horovodrun does).
        default_slots: ``--slots-per-host``.

    Returns:
        The hosts it printed.

    Raises:
        LauncherError: If it cannot run, fails, hangs or prints garbage.
    """
    try:
        done = subprocess.run(script, shell=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, errors="replace",
                              timeout=DISCOVERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LauncherError("--host-discovery-script %s did not finish in "
                            "%g s" % (script, DISCOVERY_TIMEOUT_S)) from None
    except OSError as exc:
        raise LauncherError("cannot run --host-discovery-script %s: %s"
                            % (script, exc)) from None
    if done.returncode != 0:
        raise LauncherError(
            "--host-discovery-script %s exited with code %d: %s"
            % (script, done.returncode,
               done.stderr.strip()[-500:] or "(no message)"))
    return parse_discovery_output(done.stdout, default_slots, script)


class Blacklist:
    """Hosts on which a rank failed, each until its cool-down ends.

    Args:
        cooldown_range: ``(MIN, MAX)`` seconds, or None: blacklisted for
            the rest of the job.
        clock: Returns the time in seconds (tests pass a fake).
    """

    def __init__(self, cooldown_range: Optional[Tuple[float, float]] = None,
                 clock=time.monotonic) -> None:
        self._range = cooldown_range
        self._clock = clock
        self._failures: Dict[str, int] = {}
        self._until: Dict[str, float] = {}

    def add(self, host: str) -> None:
        """Blacklists ``host`` after one more failure there."""
        count = self._failures.get(host, 0) + 1
        self._failures[host] = count
        if self._range is None:
            self._until[host] = float("inf")
        else:
            low, high = self._range
            self._until[host] = self._clock() + min(high,
                                                    low * 2 ** (count - 1))

    def blocked(self, host: str) -> bool:
        """Whether ``host`` is still cooling down."""
        return self._clock() < self._until.get(host, float("-inf"))

    def usable(self, hosts: Sequence[Host]) -> List[Host]:
        """Returns ``hosts`` without the blacklisted ones, in order."""
        return [host for host in hosts if not self.blocked(host.name)]
