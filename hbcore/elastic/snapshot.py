"""A commit's copy of a state's values, taken with one memcpy per array.

A plain ``pickle.dumps`` of a large numpy array copies it (into the
pickle's frames and then into the result bytes: ~10x a memcpy, measured
in docs/elastic.md "What a commit costs").  A Snapshot pickles with
protocol 5 and out-of-band buffers instead: the pickle holds only the
structure (``meta``, small), and each contiguous array's memory is copied
once into a buffer of the snapshot -- into the previous snapshot's
buffers when they have the same sizes, so a steady commit allocates
nothing (fresh pages are what makes a new copy slow).

Arrays the caller made for the snapshot alone (``owned``: the TF states'
variable values, read to numpy once) are kept by reference, not copied.

Serialised form (a store file, a broadcast), little-endian::

    b"HBS1" | n: u64 | len(meta): u64 | len(buffer i): u64 * n
    | meta | buffer 0 | ... | buffer n-1

``chunks()`` gives it as pieces, so a file is written straight from the
buffers without joining them first.
"""

import pickle
import struct
from typing import Any, List, Optional, Sequence

_MAGIC = b"HBS1"
_U64 = struct.Struct("<Q")


class Snapshot:
    """Pickle-5 metadata plus out-of-band buffers (the module comment).

    Args:
        meta: The pickle, with the buffers left out.
        buffers: The buffers, in the pickle's order.
        copied: Per buffer, whether the snapshot owns a copy it may
            overwrite on the next ``take(..., reuse=self)``.
    """

    def __init__(self, meta: bytes, buffers: Sequence[Any],
                 copied: Optional[Sequence[bool]] = None) -> None:
        self.meta = meta
        self.buffers = [memoryview(b).cast("B") for b in buffers]
        self._copied = list(copied if copied is not None
                            else [False] * len(self.buffers))

    @classmethod
    def take(cls, value: Any, owned: Sequence[Any] = (),
             reuse: Optional["Snapshot"] = None) -> "Snapshot":
        """Copies ``value`` (any picklable tree).

        Args:
            value: What to keep.
            owned: Arrays inside ``value`` that nobody else will change
                (kept without a copy).
            reuse: A snapshot whose copied buffers may be overwritten
                (the previous commit's, when ``value`` replaces it).

        Returns:
            The Snapshot; later changes of ``value`` never reach it.

        Raises:
            pickle.PicklingError, TypeError: ``value`` is not picklable
                (``reuse`` is then untouched: the copies come after).
        """
        raw: List[Any] = []
        meta = pickle.dumps(value, protocol=5, buffer_callback=raw.append)
        owned_ids = {id(a) for a in owned}
        old = reuse.buffers if reuse is not None else []
        buffers, copied = [], []
        for i, pickle_buffer in enumerate(raw):
            view = pickle_buffer.raw()
            if id(view.obj) in owned_ids:
                buffers.append(view)
                copied.append(False)
                continue
            if (i < len(old) and reuse is not None and reuse._copied[i]
                    and old[i].nbytes == view.nbytes):
                old[i][:] = view
                buffers.append(old[i])
            else:
                buffers.append(bytearray(view))
            copied.append(True)
        return cls(meta, buffers, copied)

    def value(self) -> Any:
        """A fresh copy of the value (writable arrays of their own)."""
        return pickle.loads(self.meta,
                            buffers=[bytearray(b) for b in self.buffers])

    def chunks(self) -> List[memoryview]:
        """The serialised form in pieces (the module comment)."""
        header = [_MAGIC, _U64.pack(len(self.buffers)),
                  _U64.pack(len(self.meta))]
        header += [_U64.pack(b.nbytes) for b in self.buffers]
        return [memoryview(b"".join(header)), memoryview(self.meta)
                ] + self.buffers

    def to_bytes(self) -> bytes:
        """The serialised form as one bytes object."""
        return b"".join(self.chunks())

    @classmethod
    def from_bytes(cls, data: Any) -> "Snapshot":
        """Reads the serialised form (its buffers are views of ``data``).

        Raises:
            ValueError: ``data`` is not a serialised Snapshot.
        """
        view = memoryview(data).cast("B")
        if bytes(view[:4]) != _MAGIC:
            raise ValueError("hbcore.elastic: not a commit snapshot "
                             "(starts with %r)" % bytes(view[:4]))
        count = _U64.unpack_from(view, 4)[0]
        sizes = [_U64.unpack_from(view, 12 + 8 * i)[0]
                 for i in range(count + 1)]
        offset = 12 + 8 * (count + 1)
        pieces = []
        for size in sizes:
            pieces.append(view[offset:offset + size])
            offset += size
        if offset != len(view):
            raise ValueError("hbcore.elastic: a commit snapshot of %d bytes "
                             "holds %d" % (len(view), offset))
        return cls(bytes(pieces[0]), pieces[1:])
