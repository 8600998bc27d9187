"""The op x dtype x shape table of the hbcore_tf rank script.

Each Spec is one collective call with rank-seeded inputs and the numpy
answer, computed on every rank from every rank's recomputed inputs. The
rank script runs the whole table three ways: eagerly (one call at a time),
inside one tf.function, and in one tf.compat.v1 graph (one Session.run);
the last two submit all of the table's collectives at once.

No TensorFlow or hbcore import here: ``group_names()`` is read by the
pytest side without starting MPI.
"""
import zlib
from typing import Any, Callable, List, NamedTuple, Sequence

import numpy as np

from common import (DTYPE_NAMES, all_rank_data, is_float, rank_data,
                    reduce_expected, reducescatter_rows)

OPS = ["Average", "Sum", "Min", "Max", "Product"]
BOOL_OPS = ["Sum", "Min", "Max", "Product"]
SHAPES = [(), (5,), (2, 3, 4)]

OP_KINDS = ["allreduce", "scaled", "allgather", "broadcast", "alltoall",
            "reducescatter", "grouped_allreduce", "grouped_allgather",
            "grouped_reducescatter"]


class Spec(NamedTuple):
    """One collective call.

    key: case name suffix, '<kind>/<dtype>/<detail>'.
    call: fn(hvd, inputs as tf tensors) -> list of tf tensors.
    inputs: this rank's numpy inputs.
    expected: numpy arrays, one per output of ``call``.
    dtype: dtype name for the comparison of the first outputs.
    """
    key: str
    call: Callable[[Any, List[Any]], List[Any]]
    inputs: List[np.ndarray]
    expected: List[np.ndarray]
    dtype: str


def seed(*parts: Any) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def shape_label(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def splits_of(src: int, size: int) -> List[int]:
    """alltoall rows rank ``src`` sends to each rank (some zero)."""
    return [(src + 2 * dst) % 3 for dst in range(size)]


def _op(hvd: Any, name: str) -> Any:
    return getattr(hvd, name)


def allreduce_specs(dt: str, size: int, rank: int) -> List[Spec]:
    specs = []
    for shape in SHAPES:
        for op in (BOOL_OPS if dt == "bool" else OPS):
            key = "allreduce/%s/%s/%s" % (dt, shape_label(shape), op)
            kind = "positive" if op == "Product" else "any"
            inputs = all_rank_data(seed(key), size, shape, dt, kind)
            if op == "Average":  # the default op
                call = (lambda hvd, xs: [hvd.allreduce(xs[0])])
            else:
                call = (lambda hvd, xs, op=op:
                        [hvd.allreduce(xs[0], op=_op(hvd, op))])
            specs.append(Spec(key, call, [inputs[rank]],
                              [reduce_expected(inputs, dt, op)], dt))
    return specs


def scaled_specs(dt: str, size: int, rank: int) -> List[Spec]:
    if dt == "bool":
        return []
    pre, post = (0.5, 1.5) if is_float(dt) else (2, 3)
    specs = []
    for op in ("Sum", "Average"):
        key = "scaled/%s/%s" % (dt, op)
        inputs = all_rank_data(seed(key), size, (6,), dt, "small")
        call = (lambda hvd, xs, op=op: [hvd.allreduce(
            xs[0], op=_op(hvd, op), prescale_factor=pre,
            postscale_factor=post)])
        specs.append(Spec(key, call, [inputs[rank]],
                          [reduce_expected(inputs, dt, op, pre, post)], dt))
    return specs


def allgather_specs(dt: str, size: int, rank: int) -> List[Spec]:
    specs = []
    shapes = {"1d": lambda r: (r + 1,),
              "3d": lambda r: (r % 2 + 1, 2, 3),
              "zero-rows-on-0": lambda r: (0 if r == 0 else 2, 3)}
    for label, shape_fn in shapes.items():
        key = "allgather/%s/%s" % (dt, label)
        inputs = [rank_data(seed(key), r, shape_fn(r), dt)
                  for r in range(size)]
        specs.append(Spec(key, lambda hvd, xs: [hvd.allgather(xs[0])],
                          [inputs[rank]], [np.concatenate(inputs)], dt))
    return specs


def broadcast_specs(dt: str, size: int, rank: int) -> List[Spec]:
    specs = []
    root = size - 1
    for shape in SHAPES:
        key = "broadcast/%s/%s" % (dt, shape_label(shape))
        inputs = all_rank_data(seed(key), size, shape, dt)
        specs.append(Spec(key, lambda hvd, xs: [hvd.broadcast(xs[0], root)],
                          [inputs[rank]], [inputs[root]], dt))
    return specs


def alltoall_specs(dt: str, size: int, rank: int) -> List[Spec]:
    specs = []
    for label, trailing in (("1d", ()), ("3d", (2, 2))):
        key = "alltoall/%s/even-%s" % (dt, label)
        inputs = all_rank_data(seed(key), size, (2 * size,) + trailing, dt)
        expected = np.concatenate([x[2 * rank:2 * rank + 2] for x in inputs])
        specs.append(Spec(key, lambda hvd, xs: [hvd.alltoall(xs[0])],
                          [inputs[rank]], [expected], dt))

        key = "alltoall/%s/splits-%s" % (dt, label)
        inputs = [rank_data(seed(key), src,
                            (sum(splits_of(src, size)),) + trailing, dt)
                  for src in range(size)]
        pieces, received = [], []
        for src in range(size):
            sp = splits_of(src, size)
            start = sum(sp[:rank])
            pieces.append(inputs[src][start:start + sp[rank]])
            received.append(sp[rank])
        my_splits = splits_of(rank, size)
        specs.append(Spec(
            key, lambda hvd, xs: list(hvd.alltoall(xs[0], splits=my_splits)),
            [inputs[rank]],
            [np.concatenate(pieces), np.asarray(received, np.int32)], dt))
    return specs


def reducescatter_specs(dt: str, size: int, rank: int) -> List[Spec]:
    specs = []
    ops = ["Sum", "Min"] if dt == "bool" else ["Sum", "Average", "Max"]
    for op in ops:
        for label, trailing in (("1d", ()), ("3d", (2, 3))):
            key = "reducescatter/%s/%s/%s" % (dt, op, label)
            n = 2 * size + 1
            inputs = all_rank_data(seed(key), size, (n,) + trailing, dt)
            start, count = reducescatter_rows(n, size, rank)
            full = reduce_expected(inputs, dt, op)
            call = (lambda hvd, xs, op=op:
                    [hvd.reducescatter(xs[0], op=_op(hvd, op))])
            specs.append(Spec(key, call, [inputs[rank]],
                              [full[start:start + count]], dt))
    return specs


def grouped_specs(dt: str, size: int, rank: int) -> List[Spec]:
    shapes = [(3,), (2, 2, 2), (7,)]
    op = "Max"
    key = "grouped_allreduce/%s" % dt
    per_tensor = [all_rank_data(seed(key, i), size, s, dt)
                  for i, s in enumerate(shapes)]
    specs = [Spec(key, lambda hvd, xs: hvd.grouped_allreduce(
        xs, op=hvd.Max), [t[rank] for t in per_tensor],
        [reduce_expected(t, dt, op) for t in per_tensor], dt)]

    key = "grouped_allgather/%s" % dt
    per_tensor = [[rank_data(seed(key, i), r, (r + i,) + trailing, dt)
                   for r in range(size)]
                  for i, trailing in enumerate([(), (2, 2)])]
    specs.append(Spec(key, lambda hvd, xs: hvd.grouped_allgather(xs),
                      [t[rank] for t in per_tensor],
                      [np.concatenate(t) for t in per_tensor], dt))

    key = "grouped_reducescatter/%s" % dt
    op = "Min" if dt == "bool" else "Sum"
    n = size + 2
    per_tensor = [all_rank_data(seed(key, i), size, (n,) + trailing, dt)
                  for i, trailing in enumerate([(), (3,)])]
    start, count = reducescatter_rows(n, size, rank)
    specs.append(Spec(key, lambda hvd, xs, op=op: hvd.grouped_reducescatter(
        xs, op=_op(hvd, op)), [t[rank] for t in per_tensor],
        [reduce_expected(t, dt, op)[start:start + count]
         for t in per_tensor], dt))
    return specs


BUILDERS = [allreduce_specs, scaled_specs, allgather_specs, broadcast_specs,
            alltoall_specs, reducescatter_specs, grouped_specs]


def build_specs(size: int, rank: int) -> List[Spec]:
    """Every spec, in the same order on every rank."""
    specs = []
    for dt in DTYPE_NAMES:
        for builder in BUILDERS:
            specs.extend(builder(dt, size, rank))
    return specs


MODES = ["eager", "function", "graph"]


def group_names() -> List[str]:
    """'<mode>/<kind>' groups of the table (for pytest parametrisation)."""
    return ["%s/%s" % (mode, kind) for mode in MODES for kind in OP_KINDS]
