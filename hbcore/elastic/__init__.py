"""``hbcore.elastic``: Horovod's elastic API for the numpy front end.

    import hbcore as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(epoch=0, weights=w)

    @hvd.elastic.run
    def train(state): ...

Launched with ``hbrun --min-np/--max-np/--host-discovery-script``, a job
that loses a rank or gains hosts goes on from its last commit
(docs/elastic.md).  Modules: store (the per-host commit store), state
(State, ObjectState and their protocol), run (the retry loop).
"""

from hbcore.elastic.run import run
from hbcore.elastic.state import ObjectState, RowShardedState, State
from hbcore.exceptions import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["run", "State", "ObjectState", "RowShardedState", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
