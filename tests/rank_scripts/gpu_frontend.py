"""Rank script: the numpy API's DLPack front end (hbcore/_dlpack.py).

    hbrun -np N python gpu_frontend.py

- host/*: host tensors that numpy can read only through DLPack
  (HostDlpack) take the numpy path in every collective; results are
  checked against numpy on the rank-seeded data of every rank.
- gpu/*: CUDA tensors (FakeDeviceTensor, a ctypes-built DLPack producer of
  device type 2) on a runtime without GPU support are refused with
  UnsupportedError, and every tensor hbcore consumed is released exactly
  once. Run only when ``hbcore.nccl_built()`` is False after init (the
  report's ``nccl_built`` says which).
- misc/*: the runtime keeps working after those refusals; a handle
  dropped while its operation is in flight keeps its buffers until the
  operation finished.
"""
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (CaseFailure, Checker, all_rank_data,  # noqa: E402
                    assert_close, await_peers, expect_raises,
                    reduce_expected, report, signal_peers)
from dlpack_producers import FakeDeviceTensor, HostDlpack  # noqa: E402

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402
from hbcore._native import core  # noqa: E402

HOST_DTYPES = ["uint8", "int32", "int64", "float16", "float32", "float64",
               "bool"]


def host_cases(rank, size):
    """(name, fn) of the host-path cases."""
    cases = []
    for dt in HOST_DTYPES:
        def allreduce(dt=dt):
            data = all_rank_data(11, size, (3, 4), dt)
            out = hb.allreduce(HostDlpack(data[rank]), op=hb.Sum,
                               name="host.allreduce." + dt)
            assert_close(out, reduce_expected(data, dt, "Sum"), dt)
        cases.append(("host/allreduce/" + dt, allreduce))

    def allgather():
        data = [all_rank_data(12, size, (r + 1, 2), "float32")[r]
                for r in range(size)]
        out = hb.allgather(HostDlpack(data[rank]), name="host.allgather")
        assert_close(out, np.concatenate(data), "float32")

    def broadcast():
        data = all_rank_data(13, size, (5,), "int32")
        out = hb.broadcast(HostDlpack(data[rank]), size - 1,
                           name="host.broadcast")
        assert_close(out, data[size - 1], "int32")

    def alltoall():
        data = all_rank_data(14, size, (size, 3), "float64")
        out, received = hb.alltoall(HostDlpack(data[rank]),
                                    splits=[1] * size, name="host.alltoall")
        assert_close(out, np.stack([d[rank] for d in data]), "float64")
        if list(received) != [1] * size:
            raise CaseFailure("received splits %s" % list(received))

    def reducescatter():
        data = all_rank_data(15, size, (2 * size, 3), "float32")
        out = hb.reducescatter(HostDlpack(data[rank]), op=hb.Sum,
                               name="host.reducescatter")
        expected = reduce_expected(data, "float32", "Sum")
        assert_close(out, expected[2 * rank:2 * rank + 2], "float32")

    def grouped():
        # DLPack producers and numpy arrays mix freely on the host path.
        a = all_rank_data(16, size, (4,), "float32")
        b = all_rank_data(17, size, (2, 2), "int64")
        outs = hb.grouped_allreduce([HostDlpack(a[rank]), b[rank]],
                                    op=hb.Sum, name="host.grouped")
        assert_close(outs[0], reduce_expected(a, "float32", "Sum"), "float32")
        assert_close(outs[1], reduce_expected(b, "int64", "Sum"), "int64")
        gathered = hb.grouped_allgather([HostDlpack(a[rank])],
                                        name="host.grouped_allgather")
        assert_close(gathered[0], np.concatenate(a), "float32")
        scattered = hb.grouped_reducescatter(
            [HostDlpack(np.tile(a[rank], (size, 1)))], op=hb.Sum,
            name="host.grouped_reducescatter")
        assert_close(scattered[0],
                     reduce_expected(a, "float32", "Sum")[None, :], "float32")

    def non_contiguous():
        # A strided host view is copied to C order, as numpy arrays are.
        data = all_rank_data(18, size, (4, 3), "float32")
        out = hb.allreduce(HostDlpack(data[rank].T), op=hb.Sum,
                           name="host.strided")
        assert_close(out, reduce_expected(data, "float32", "Sum").T.copy(),
                     "float32")

    def inplace():
        data = all_rank_data(19, size, (6,), "float32")
        tensor = HostDlpack(data[rank].copy())
        result = hb.allreduce_(tensor, op=hb.Sum, name="host.allreduce_")
        if result is not tensor:
            raise CaseFailure("allreduce_ returned %r, not its argument"
                              % (result,))
        assert_close(tensor.array, reduce_expected(data, "float32", "Sum"),
                     "float32", "the tensor written in place")
        tensor = HostDlpack(data[rank].copy())
        hb.broadcast_(tensor, 0, name="host.broadcast_")
        assert_close(tensor.array, data[0], "float32", "broadcast_")

    def asynchronous():
        data = all_rank_data(20, size, (3,), "int32")
        handle = hb.allreduce_async(HostDlpack(data[rank]), op=hb.Sum,
                                    name="host.async")
        assert_close(hb.synchronize(handle),
                     reduce_expected(data, "int32", "Sum"), "int32")

    cases += [("host/allgather", allgather), ("host/broadcast", broadcast),
              ("host/alltoall", alltoall),
              ("host/reducescatter", reducescatter),
              ("host/grouped", grouped), ("host/non-contiguous",
                                          non_contiguous),
              ("host/inplace", inplace), ("host/async", asynchronous)]
    return cases


def expect_unsupported(fn, tensors, *fragments):
    """fn() raises UnsupportedError (status HB_ERR_UNSUPPORTED) whose
    message has every fragment; every tensor hbcore took is then released
    exactly once."""
    exc = expect_raises(fn, hx.UnsupportedError, *fragments)
    if exc.status != core.HB_ERR_UNSUPPORTED:
        raise CaseFailure("status %r, expected HB_ERR_UNSUPPORTED"
                          % (exc.status,))
    del exc
    gc.collect()
    for t in tensors:
        if t.deleter_calls != [1] * len(t.calls):
            raise CaseFailure("deleter calls %s for %d exports"
                              % (t.deleter_calls, len(t.calls)))
        if t.calls and t.calls[0].get("stream") != 1:
            raise CaseFailure("__dlpack__ called with %s" % t.calls[0])


def gpu_cases():
    """(name, fn) of the GPU-refusal cases (runtime without GPU support)."""
    def allreduce():
        t = FakeDeviceTensor([4])
        # The output buffer is allocated first, which names the library
        # the runtime could not load.
        expect_unsupported(lambda: hb.allreduce(t, name="gpu.allreduce"),
                           [t], "no GPU support", "hbcore[gpu]")

    def allocated_outputs():
        for op, fn in [
                ("allgather", lambda t: hb.allgather(t, name="gpu.ag")),
                ("reducescatter",
                 lambda t: hb.reducescatter(t, name="gpu.rs")),
                ("alltoall", lambda t: hb.alltoall(t, name="gpu.a2a")),
                ("broadcast", lambda t: hb.broadcast_(t, 0, name="gpu.b_")),
                ("allreduce", lambda t: hb.allreduce_(t, name="gpu.ar_"))]:
            t = FakeDeviceTensor([6, 2])
            # The core refuses the request at enqueue: the message names
            # the operation and the device.
            expect_unsupported(lambda: fn(t), [t], op, "device 0")

    def grouped():
        ts = [FakeDeviceTensor([3]), FakeDeviceTensor([2], versioned=True)]
        expect_unsupported(
            lambda: hb.grouped_allgather(ts, name="gpu.grouped"), ts,
            "allgather", "gpu.grouped", "device 0")

    def mixed():
        t = FakeDeviceTensor([2])
        expect_raises(lambda: hb.grouped_allreduce(
            [np.zeros(2, np.float32), t], name="gpu.mixed"),
            hx.InvalidArgumentError, "not both", "tensor 0 is in host memory",
            "tensor 1 on a GPU")
        gc.collect()
        if t.deleter_calls != [1]:
            raise CaseFailure("deleter calls %s" % t.deleter_calls)

    return [("gpu/allreduce", allreduce),
            ("gpu/allocated-outputs", allocated_outputs),
            ("gpu/grouped", grouped), ("gpu/mixed", mixed)]


def misc_cases(rank, size):
    def still_works():
        data = all_rank_data(21, size, (5,), "float32")
        assert_close(hb.allreduce(data[rank], op=hb.Sum, name="misc.after"),
                     reduce_expected(data, "float32", "Sum"), "float32")

    def dropped_handle():
        # Every rank but the last submits and drops its handle while the
        # operation cannot finish (the last rank submits only after their
        # markers): its buffers are parked until it did.
        late = size - 1
        data = all_rank_data(22, size, (1000,), "float32")
        if rank != late:
            handle = hb.allreduce_async(data[rank], name="misc.dropped")
            del handle
            if core.parked_operations() != 1:
                raise CaseFailure("parked_operations() = %d after dropping "
                                  "an unfinished handle"
                                  % core.parked_operations())
            signal_peers("dropped.%d" % rank)
        else:
            await_peers(["dropped.%d" % r for r in range(size - 1)])
            out = hb.allreduce(data[rank], name="misc.dropped")
            assert_close(out, reduce_expected(data, "float32", "Average"),
                         "float32")
        deadline = time.monotonic() + 30
        while core.parked_operations():
            if time.monotonic() > deadline:
                raise CaseFailure("the dropped operation never finished")
            time.sleep(0.005)
        hb.barrier()

    return [("misc/still-works", still_works),
            ("misc/dropped-handle", dropped_handle)]


def main() -> None:
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    gpu_support = hb.nccl_built()
    cases = host_cases(rank, size)
    if not gpu_support:
        cases += gpu_cases()
    cases += misc_cases(rank, size)
    for name, fn in cases:
        checker.run(name, fn)
    report({"size": size, "nccl_built": gpu_support,
            "cases": [name for name, _ in cases]})
    hb.shutdown()


if __name__ == "__main__":
    main()
