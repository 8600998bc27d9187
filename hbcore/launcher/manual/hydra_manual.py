"""Hydra's ``manual`` launcher: its proxy commands as data, and back.

``mpiexec -launcher manual`` starts no remote process itself: it prints,
for every host of ``-hosts``, the command that host's proxy must run::

    HYDRA_LAUNCH: /venv/bin/hydra_pmi_proxy --control-port vm:41077 \
        --rmk user --launcher manual --demux poll --pgid 0 --retries 10 \
        --usize -1 --pmi-port 0 --gpus-per-proc -2 \
        --gpu-subdevs-per-proc -2 --proxy-id 0
    HYDRA_LAUNCH_END

and waits until every proxy has connected to its control port. The
rendezvous (rendezvous.py) must not ship such a line to another machine
and run it there: a peer sends data, never a command line. So the chief's
side turns each line into :class:`ProxyData` (the control port, and every
other option as a name and a value, each checked against a closed table of
hydra's proxy options), and the machine that runs the proxy builds the
command itself from that data with its own ``hydra_pmi_proxy`` and the
control host it already knows (the address it reached the chief at).
"""

import os
import re
import shlex
from typing import Dict, List, NamedTuple, Optional

from hbcore.launcher.errors import LauncherError

LAUNCH_PREFIX = "HYDRA_LAUNCH: "
LAUNCH_END = "HYDRA_LAUNCH_END"
PROXY_NAME = "hydra_pmi_proxy"

_INTEGER = re.compile(r"^-?\d{1,9}$")
_WORD = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# The options hydra 4.x and 5.x print for a manual launch, with what their
# values may be. An option outside this table is refused on both sides.
PROXY_OPTIONS = {
    "--rmk": _WORD, "--launcher": re.compile(r"^manual$"),
    "--demux": _WORD, "--pgid": _INTEGER, "--retries": _INTEGER,
    "--usize": _INTEGER, "--pmi-port": _INTEGER,
    "--gpus-per-proc": _INTEGER, "--gpu-subdevs-per-proc": _INTEGER,
    "--proxy-id": _INTEGER,
}
_MAX_OPTIONS = 32


class ProxyData(NamedTuple):
    """What a machine needs to start its proxy of a manual launch.

    Attributes:
        control_port: The port of mpiexec's control socket (its host is the
            chief's, which the proxy's machine knows already).
        options: The other options, in hydra's order, as (name, value).
    """
    control_port: int
    options: List[List[str]]

    @property
    def proxy_id(self) -> int:
        """The proxy's id (hydra's index of its host in ``-hosts``)."""
        return int(dict((name, value) for name, value in self.options)
                   ["--proxy-id"])


def check_proxy_data(control_port: object, options: object) -> ProxyData:
    """Validates proxy data received from a peer (or parsed from hydra).

    Args:
        control_port: Should be a port number.
        options: Should be a list of [name, value] pairs of PROXY_OPTIONS,
            each name once, ``--proxy-id`` among them.

    Returns:
        The data.

    Raises:
        LauncherError: Anything else, naming the field.
    """
    if (not isinstance(control_port, int) or isinstance(control_port, bool)
            or not 1 <= control_port <= 65535):
        raise LauncherError("proxy data: control port %r is not a port"
                            % (control_port,))
    if not isinstance(options, list) or len(options) > _MAX_OPTIONS:
        raise LauncherError("proxy data: options must be a list of pairs")
    seen = set()
    for pair in options:
        if (not isinstance(pair, list) or len(pair) != 2
                or not all(isinstance(item, str) for item in pair)):
            raise LauncherError("proxy data: option %r is not a [name, value] "
                                "pair" % (pair,))
        name, value = pair
        pattern = PROXY_OPTIONS.get(name)
        if pattern is None or name in seen or not pattern.match(value):
            raise LauncherError("proxy data: option %s %r is not one hbcore "
                                "passes to hydra's proxy" % (name, value))
        seen.add(name)
    if "--proxy-id" not in seen:
        raise LauncherError("proxy data: no --proxy-id")
    return ProxyData(control_port, [list(pair) for pair in options])


def parse_launch_line(line: str) -> ProxyData:
    """Turns one ``HYDRA_LAUNCH:`` line of mpiexec into proxy data.

    Args:
        line: The line, with or without its newline.

    Returns:
        The data (the proxy path and the control host are dropped: the
        proxy's machine uses its own).

    Raises:
        LauncherError: The line has another form than hydra's known one.
    """
    words = shlex.split(line[len(LAUNCH_PREFIX):])
    if (not line.startswith(LAUNCH_PREFIX) or len(words) < 3
            or os.path.basename(words[0]) != PROXY_NAME
            or words[1] != "--control-port" or len(words) % 2 != 1):
        raise LauncherError("unexpected manual-launch line from mpiexec: %r"
                            % line.strip())
    port = words[2].rpartition(":")[2]
    if not port.isdigit():
        raise LauncherError("unexpected control port in %r" % line.strip())
    options = [[words[i], words[i + 1]] for i in range(3, len(words), 2)]
    try:
        return check_proxy_data(int(port), options)
    except LauncherError as exc:
        raise LauncherError("%s (this hydra's proxy command is %r; hbcore "
                            "knows hydra 4.x and 5.x)" % (exc, line.strip()))


def proxy_command(proxy: str, control_host: str, data: ProxyData
                  ) -> List[str]:
    """Builds the proxy command this machine runs.

    Args:
        proxy: This machine's ``hydra_pmi_proxy``.
        control_host: The chief's host, as this machine reaches it.
        data: Validated proxy data.

    Returns:
        The argument list.
    """
    host = "[%s]" % control_host if ":" in control_host else control_host
    args = [proxy, "--control-port", "%s:%d" % (host, data.control_port)]
    for name, value in data.options:
        args += [name, value]
    return args


def find_proxy(mpiexec: str) -> str:
    """Returns the ``hydra_pmi_proxy`` that belongs to an mpiexec.

    Args:
        mpiexec: The absolute path of hydra's mpiexec.

    Returns:
        The proxy's path, in mpiexec's directory.

    Raises:
        LauncherError: There is none.
    """
    proxy = os.path.join(os.path.dirname(os.path.realpath(mpiexec)),
                         PROXY_NAME)
    if not os.access(proxy, os.X_OK):
        raise LauncherError("no %s next to %s (a manual launch needs hydra's "
                            "proxy)" % (PROXY_NAME, mpiexec))
    return proxy


def manual_command(mpiexec: str, hosts: List[str],
                   segments: List[Dict[str, str]], rank_command: List[str],
                   mpi_args: Optional[List[str]] = None) -> List[str]:
    """Builds the chief's ``mpiexec -launcher manual`` command line.

    Every rank is one MPMD segment with its own variables; the ranks get no
    variable of the chief's environment (``-genvnone``): each rank's
    environment is that of its own machine's proxy, i.e. of the launcher
    started there.

    Args:
        mpiexec: Hydra's mpiexec.
        hosts: One ``label:slots`` per machine, in rank order.
        segments: One dict of variables per rank.
        rank_command: What every rank runs.
        mpi_args: Extra mpiexec arguments.

    Returns:
        The argument list.
    """
    args = [mpiexec, "-launcher", "manual", "-genvnone",
            "-hosts", ",".join(hosts)] + list(mpi_args or [])
    for index, env in enumerate(segments):
        if index:
            args.append(":")
        args += ["-n", "1"]
        for name, value in sorted(env.items()):
            args += ["-env", name, value]
        args += list(rank_command)
    return args
