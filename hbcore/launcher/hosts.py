"""Host lists for hbrun: ``-H host1:2,host2:2`` and ``--hostfile``."""

import re
from typing import List, NamedTuple

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


class Host(NamedTuple):
    """One host and the number of ranks (slots) it runs."""
    name: str
    slots: int


def _host(name: str, slots_text: str, where: str) -> Host:
    name = name.strip()
    if not name or not _NAME.match(name):
        raise ValueError("bad host name %r in %s" % (name, where))
    try:
        slots = int(slots_text)
    except ValueError:
        raise ValueError("bad slot count %r for host %r in %s"
                         % (slots_text, name, where)) from None
    if slots < 1:
        raise ValueError("slot count for host %r must be >= 1 in %s"
                         % (name, where))
    return Host(name, slots)


def parse_hosts(text: str) -> List[Host]:
    """Parses a horovodrun style host list.

    Args:
        text: ``"host1:2,host2:2"``; a host without ``:N`` has one slot.

    Returns:
        The hosts in order.

    Raises:
        ValueError: If an entry is malformed; the message names it.
    """
    hosts = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            raise ValueError("empty entry in host list %r" % text)
        name, sep, slots = entry.rpartition(":")
        if not sep:
            name, slots = entry, "1"
        hosts.append(_host(name, slots, "host list %r" % text))
    return hosts


def parse_hostfile(path: str) -> List[Host]:
    """Reads a hostfile.

    Accepts horovodrun/Open MPI lines (``host slots=4``), hydra lines
    (``host:4``) and bare host names (one slot); ``#`` starts a comment.

    Args:
        path: The hostfile.

    Returns:
        The hosts in file order.

    Raises:
        ValueError: If a line is malformed or the file names no host.
        OSError: If the file cannot be read.
    """
    hosts = []
    with open(path) as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            where = "%s line %d" % (path, number)
            match = re.match(r"^(\S+)\s+slots\s*=\s*(\S+)$", line)
            if match:
                hosts.append(_host(match.group(1), match.group(2), where))
            elif len(line.split()) == 1:
                name, sep, slots = line.rpartition(":")
                hosts.append(_host(name, slots, where) if sep
                             else _host(line, "1", where))
            else:
                raise ValueError("cannot parse %s: %r" % (where, line))
    if not hosts:
        raise ValueError("hostfile %s names no host" % path)
    return hosts


def total_slots(hosts: List[Host]) -> int:
    """Returns the number of slots over all hosts.

    Args:
        hosts: As returned by parse_hosts or parse_hostfile.

    Returns:
        The sum of the hosts' slot counts (0 for no hosts).
    """
    return sum(host.slots for host in hosts)


def hydra_hosts_arg(hosts: List[Host]) -> str:
    """Formats hosts for hydra's ``-hosts`` option.

    Args:
        hosts: As returned by parse_hosts or parse_hostfile.

    Returns:
        The ``name:slots`` entries joined by commas, e.g. ``"h1:2,h2:2"``.
    """
    return ",".join("%s:%d" % (host.name, host.slots) for host in hosts)
