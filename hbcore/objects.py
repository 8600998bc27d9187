"""Collectives on picklable Python objects (cloudpickle over uint8 arrays).

Protocol: every rank first sends a header ``[status, nbytes]`` (status 0:
the payload that follows is the pickled object; 1: this rank could not
pickle its object, and the payload is the error's text), then the payload.
The collectives run the same way whether pickling worked or not, so a rank
that fails never leaves its peers waiting: every rank learns of the
failure and raises (the failing rank its own exception, the others a
TypeError naming that rank and the error).
"""
import io
from typing import Any, List, Optional, Tuple

import cloudpickle
import numpy as np

from hbcore import ops
from hbcore.basics import rank
from hbcore.process_sets import ProcessSet, global_process_set, process_set_id

_PICKLED, _FAILED = 0, 1


def _pickled(obj: Any) -> Tuple[np.ndarray, Optional[BaseException]]:
    """(header + payload fields) for ``obj``: its pickle, or the text of
    the error pickling raised, and that error."""
    buffer = io.BytesIO()
    try:
        cloudpickle.dump(obj, buffer)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is sent
        text = ("%s: %s" % (type(exc).__name__, exc)).encode("utf-8",
                                                              "replace")
        return np.frombuffer(text, dtype=np.uint8), exc
    return np.frombuffer(buffer.getbuffer(), dtype=np.uint8), None


def _header(payload: np.ndarray, error: Optional[BaseException]
            ) -> np.ndarray:
    return np.array([[_FAILED if error else _PICKLED, payload.size]],
                    np.int64)


def _peer_failed(what: str, who: int, text: bytes) -> TypeError:
    return TypeError("%s: rank %d could not pickle its object (%s)" % (
        what, who, text.decode("utf-8", "replace")))


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

    Raises:
        Exception: on the root, what pickling its object raised; the other
            ranks then raise TypeError naming the root and that error.
        InvalidArgumentError: ``root_rank`` is not a rank of the set.
    """
    name = ops.auto_name("broadcast_object", name,
                         process_set_id(process_set))
    error = None
    if rank() == root_rank:
        payload, error = _pickled(obj)
    else:
        payload = np.zeros(0, np.uint8)
    header = ops.broadcast(_header(payload, error), root_rank,
                           name=name + ".size", process_set=process_set)
    status, nbytes = (int(v) for v in header[0])
    if rank() != root_rank:
        payload = np.zeros(nbytes, np.uint8)
    data = ops.broadcast(payload, root_rank, name=name + ".data",
                         process_set=process_set)
    if error is not None:
        raise error
    if status == _FAILED:
        raise _peer_failed("broadcast_object", root_rank, data.tobytes())
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
        Exception: on a rank whose object cannot be pickled, what pickling
            raised; every other rank then raises TypeError naming the
            first such rank and its error.
        ValueError: ``process_set`` is not registered.
        InvalidArgumentError: this rank is not a member of ``process_set``.
    """
    name = ops.auto_name("allgather_object", name,
                         process_set_id(process_set))
    payload, error = _pickled(obj)
    headers = ops.allgather(_header(payload, error), name=name + ".size",
                            process_set=process_set)
    data = ops.allgather(payload, name=name + ".data",
                         process_set=process_set)
    if error is not None:
        raise error
    # Global ranks of the members, in the order of the gathered rows (the
    # global set lists none).
    members = sorted(process_set.ranks or range(headers.shape[0]))
    out, offset = [], 0
    for member, (status, nbytes) in zip(members, headers.tolist()):
        chunk = data[offset:offset + nbytes].tobytes()
        offset += nbytes
        if status == _FAILED:
            raise _peer_failed("allgather_object", member, chunk)
        out.append(cloudpickle.loads(chunk))
    return out
