"""Collectives on picklable Python objects (cloudpickle over uint8 arrays)."""
import io
from typing import Any, List, Optional

import cloudpickle
import numpy as np

from hbcore import ops
from hbcore.basics import rank
from hbcore.process_sets import ProcessSet, global_process_set, process_set_id


def _to_bytes(obj: Any) -> np.ndarray:
    buffer = io.BytesIO()
    cloudpickle.dump(obj, buffer)
    return np.frombuffer(buffer.getbuffer(), dtype=np.uint8)


def broadcast_object(obj: Any, root_rank: int = 0,
                     name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Returns ``root_rank``'s ``obj`` on every rank (of ``process_set``).

    Args:
        obj: any cloudpickle-able object (only the root's is used).
        root_rank: (global) rank whose object is sent.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        The root's object, unpickled on every rank.
    """
    name = ops.auto_name("broadcast_object", name,
                         process_set_id(process_set))
    payload = (_to_bytes(obj) if rank() == root_rank
               else np.zeros(0, np.uint8))
    length = ops.broadcast(np.array([payload.size], np.int64), root_rank,
                           name=name + ".size", process_set=process_set)
    if rank() != root_rank:
        payload = np.zeros(int(length[0]), np.uint8)
    data = ops.broadcast(payload, root_rank, name=name + ".data",
                         process_set=process_set)
    return cloudpickle.loads(data.tobytes())


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set: ProcessSet = global_process_set
                     ) -> List[Any]:
    """Returns the list of every rank's ``obj`` (of ``process_set``).

    Args:
        obj: any cloudpickle-able object.
        name: name matched across ranks (auto-generated when None).
        process_set: the ranks it runs over (default: all).

    Returns:
        The members' objects, unpickled, in rank order.

    Raises:
        ValueError: ``process_set`` is not registered.
        InvalidArgumentError: this rank is not a member of ``process_set``.
        TypeError, pickle.PicklingError: ``obj`` cannot be pickled.
    """
    name = ops.auto_name("allgather_object", name,
                         process_set_id(process_set))
    payload = _to_bytes(obj)
    sizes = ops.allgather(np.array([payload.size], np.int64),
                          name=name + ".size", process_set=process_set)
    data = ops.allgather(payload, name=name + ".data",
                         process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(cloudpickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out

