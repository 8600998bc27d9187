"""What hbrun's elastic driver and the ranks' ``hbcore.elastic`` share.

The driver (elastic/driver.py) starts each generation of the MPI world
with these variables set on every rank; the ranks answer through their
exit code.  Standard library only: both sides import it.

Variables:
    HB_ELASTIC_GENERATION  0 for the first world, then 1, 2, ...
    HB_ELASTIC_HOSTS       this generation's hosts, ``name:slots,...`` in
                           rank order (hydra places ranks in host order,
                           so rank r runs on the host whose slot range
                           holds r)
    HB_ELASTIC_STORE       the job's store root; each host keeps its
                           commits under ``<root>/<host>/``
    HB_ELASTIC_TIMEOUT_SECONDS  ``--elastic-timeout``: the rank wrapper
                           kills a rank that hung this long (unless
                           HB_STALL_SHUTDOWN_TIME_SECONDS sets a limit;
                           hang_watch.py)
    HB_ELASTIC_NOTICE      the driver's host-change notice server,
                           ``host:port`` (elastic/notice.py); the rank
                           wrappers' store keepers also ask it whether
                           the driver still runs (store_keeper.py)
    HB_ELASTIC_NOTICE_KEY  the job's secret for it, hex

Exit codes:
    REFORM_EXIT_CODE  a rank ends its process for a re-formation: its
                      runtime failed (a peer died or left) or the hosts
                      changed; its commits are in the store.  Not a
                      failure of its host.

Finished marker: a rank whose ``hvd.elastic.run`` function returned
creates ``<root>/finished.<gen>.<rank>`` on its host before it exits; its
rank wrapper, on the same host, reports an exit 0 without that marker to
the driver as a worker that left early (rank_wrapper.py).

Stalled marker: a rank that leaves for a re-formation because the core's
stall shutdown ended its world (ranks that never submitted a tensor the
others wait for: stuck in their own code) writes the stalled ranks, a
JSON list, to ``<root>/stalled.<gen>.<rank>`` on its host; its rank
wrapper reports them in its status line (RankStatus.stalled), and the
driver counts each one as a failed rank (its host is blacklisted).

Host-change notice: over TCP from the driver, HB_ELASTIC_NOTICE
(elastic/notice.py).
"""

import os
from typing import List, Tuple

GENERATION_VAR = "HB_ELASTIC_GENERATION"
HOSTS_VAR = "HB_ELASTIC_HOSTS"
STORE_VAR = "HB_ELASTIC_STORE"
TIMEOUT_VAR = "HB_ELASTIC_TIMEOUT_SECONDS"
NOTICE_VAR = "HB_ELASTIC_NOTICE"
KEY_VAR = "HB_ELASTIC_NOTICE_KEY"
# The notice's protocol name on the authenticated wire (wire.py).
NOTICE_CONTEXT = "elastic-notice"

# EX_TEMPFAIL: "try again"; no Python or shell error uses it.
REFORM_EXIT_CODE = 75


def finished_path(store: str, generation: int, rank: int) -> str:
    """Returns the finished marker of a rank of a generation."""
    return os.path.join(store, "finished.%d.%d" % (generation, rank))


def stalled_path(store: str, generation: int, rank: int) -> str:
    """Returns the stalled marker of a rank of a generation."""
    return os.path.join(store, "stalled.%d.%d" % (generation, rank))


def parse_hosts_var(text: str) -> List[Tuple[str, int]]:
    """Parses HB_ELASTIC_HOSTS into ``[(name, slots), ...]``."""
    hosts = []
    for entry in text.split(","):
        name, _, slots = entry.rpartition(":")
        hosts.append((name, int(slots)))
    return hosts


def host_of_rank(hosts: List[Tuple[str, int]], rank: int) -> Tuple[str, int]:
    """Returns ``(host, slot index on it)`` of ``rank`` in a generation.

    Raises:
        ValueError: If the hosts have fewer slots than ``rank + 1``.
    """
    first = 0
    for name, slots in hosts:
        if rank < first + slots:
            return name, rank - first
        first += slots
    raise ValueError("rank %d is beyond the %d slots of %r"
                     % (rank, first, hosts))
