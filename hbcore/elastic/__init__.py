"""``hbcore.elastic``: Horovod's elastic API for the numpy front end.

    import hbcore as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(epoch=0, weights=w)

    @hvd.elastic.run
    def train(state): ...

Launched with ``hbrun --min-np/--max-np/--host-discovery-script``, a job
that loses a rank or gains hosts goes on from its last commit
(docs/elastic.md).  Modules: snapshot (a commit's one-copy image of the
values), store (the per-host commit store), replicas
(each rank's part also on a second host), reshard (row-sharded tables at
a new world size), state (State, ObjectState, RowShardedState and their
protocol), run (the retry loop).
"""

from hbcore.elastic.run import run
from hbcore.elastic.state import ObjectState, RowShardedState, State
from hbcore.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["run", "State", "ObjectState", "RowShardedState", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
