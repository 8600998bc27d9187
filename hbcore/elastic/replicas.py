"""A second copy of each rank's part of a commit, on another host.

What a rank holds alone (its rows of a sharded table) would be lost with
its host, so every commit also sends it to the rank's *buddy*: the rank
with the same slot index (modulo that host's slots) on the next host of
the generation, in rank order, wrapping around.  The buddy is always on
another host, so a commit's parts survive the loss of any one host.  A
world on one host has no buddy: its parts live only there.

One alltoall of bytes carries every rank's part to its buddy (a rank
sends to one rank and may receive from several, or none).
"""

from typing import List, Optional, Tuple

import numpy as np

from hbcore import ops


def buddy_rank(hosts: List[Tuple[str, int]], rank: int) -> Optional[int]:
    """Returns the rank that keeps ``rank``'s second copy, or None.

    Args:
        hosts: The generation's ``[(name, slots), ...]`` in rank order.
        rank: A rank of the generation.

    Returns:
        The buddy (on the next host), or None with a single host.
    """
    if len(hosts) < 2:
        return None
    first = 0
    for index, (_, slots) in enumerate(hosts):
        if rank < first + slots:
            slot = rank - first
            break
        first += slots
    else:
        raise ValueError("rank %d is beyond the slots of %r" % (rank, hosts))
    next_index = (index + 1) % len(hosts)
    next_first = sum(slots for _, slots in hosts[:next_index])
    return next_first + slot % hosts[next_index][1]


def exchange(payload: bytes, hosts: List[Tuple[str, int]], rank: int,
             name: str) -> List[Tuple[int, bytes]]:
    """Sends ``payload`` to this rank's buddy; a collective.

    Args:
        payload: This rank's part.
        hosts: The generation's hosts (every rank passes the same).
        rank: This rank.
        name: The collective's name (the same on every rank).

    Returns:
        ``[(sender, part), ...]``: the parts this rank keeps for others.
    """
    size = sum(slots for _, slots in hosts)
    buddy = buddy_rank(hosts, rank)
    if buddy is None:
        return []
    splits = [0] * size
    splits[buddy] = len(payload)
    received, counts = ops.alltoall(np.frombuffer(payload, np.uint8),
                                    splits=splits, name=name)
    kept, offset = [], 0
    for sender, count in enumerate(counts.tolist()):
        if count:
            kept.append((sender, received[offset:offset + count].tobytes()))
        offset += count
    return kept
