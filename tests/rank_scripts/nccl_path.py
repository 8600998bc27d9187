"""Rank script: the core's NCCL data plane, run through the fake CUDA runtime
and NCCL of tests/fake_gpu (HB_NCCL_LIBRARY / HB_CUDA_RUNTIME_LIBRARY point
there).

    hbrun -np N python nccl_path.py collectives
    hbrun -np N python nccl_path.py failure     # with FAKE_NCCL_FAIL_* set
    hbrun -np N python nccl_path.py missing     # with a bad HB_NCCL_LIBRARY
    hbrun -np 3 python nccl_path.py shared      # FAKE_CUDA_SHARED_DEVICES=1,
                                                # FAKE_CUDA_DEVICES=2

collectives: every collective on GPU tensors (FakeGpuArray, a DLPack CUDA
producer), each result checked against numpy on every rank's data AND
against the same collective on host arrays through the MPI backend; fused
batches through the device fusion buffers (the launch sets a small
HB_FUSION_THRESHOLD so several batches are in flight); scaling; uneven
allgather, alltoall and reducescatter; stream ordering (an input written
on a producer stream after a sleep); a process set; no device memory
leaked.

failure: the fake fails one rank's collective (FAKE_NCCL_FAIL_RANK/AT/
MODE); every rank must get an error naming that rank, CPU collectives must
keep working, and later GPU collectives must fail at once on every rank.

missing: GPU support could not be loaded; GPU tensors are refused naming
the library, CPU collectives work.

shared: three ranks on a machine whose two GPUs every process sees; each
rank takes device local_rank % 2, so ranks 0 and 2 share GPU 0. NCCL
refuses two ranks of a communicator on one GPU: hbcore refuses first, on
every rank, naming the two ranks and the GPU's PCI bus id; a process set of
ranks on distinct GPUs (0 and 1) still gets its communicator; CPU
collectives work; the global set's GPU collectives keep failing the same
way.
"""
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from common import (CaseFailure, Checker, all_rank_data,  # noqa: E402
                    assert_close, expect_raises, reduce_expected, report)
from fake_gpu.fake_array import (FakeGpuArray, fake_cuda,  # noqa: E402
                                 from_dlpack_capsule)

import hbcore as hb  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402

GPU_DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32",
              "float64", "bool"]
OPS = {"Sum": hb.Sum, "Average": hb.Average, "Min": hb.Min, "Max": hb.Max,
       "Product": hb.Product}


def host(x):
    """A GPU result (GpuArray) as a numpy array."""
    return from_dlpack_capsule(x)


def same_as_mpi(gpu_result, mpi_result, dtype):
    """The NCCL path's result equals the MPI backend's (floats to rounding:
    the two may add the ranks' values in different orders)."""
    assert_close(host(gpu_result), np.asarray(mpi_result), dtype)


def collective_cases(rank, size):
    cases = []
    for dt in GPU_DTYPES:
        for op_name, op in OPS.items():
            if dt == "bool" and op_name == "Average":
                continue

            def allreduce(dt=dt, op_name=op_name, op=op):
                data = all_rank_data(21, size, (5, 3), dt)
                if op_name == "Product" and dt not in ("bool",):
                    # keep products in range: values 1 and 2
                    data = [(np.abs(d.astype(np.int64)) % 2 + 1).astype(d.dtype)
                            for d in data]
                name = "nccl.allreduce.%s.%s" % (dt, op_name)
                gpu = hb.allreduce(FakeGpuArray(data[rank]), op=op,
                                   name=name)
                assert_close(host(gpu), reduce_expected(data, dt, op_name),
                             dt)
                same_as_mpi(gpu, hb.allreduce(data[rank], op=op,
                                              name=name + ".mpi"), dt)
            cases.append(("allreduce/%s/%s" % (dt, op_name), allreduce))

    def bfloat16():
        import ml_dtypes  # with TensorFlow
        data = [d.astype(ml_dtypes.bfloat16)
                for d in all_rank_data(22, size, (8,), "float32")]
        gpu = hb.allreduce(FakeGpuArray(data[rank]), op=hb.Sum,
                           name="nccl.bf16")
        mpi = hb.allreduce(data[rank], op=hb.Sum, name="nccl.bf16.mpi")
        np.testing.assert_allclose(host(gpu).astype(np.float32),
                                   mpi.astype(np.float32), rtol=2e-2,
                                   atol=0.1)  # rounded after every add
    cases.append(("allreduce/bfloat16", bfloat16))

    def scaling():
        data = all_rank_data(23, size, (64,), "float32")
        for op_name in ("Sum", "Average"):
            gpu = hb.allreduce(FakeGpuArray(data[rank]), op=OPS[op_name],
                               prescale_factor=0.5, postscale_factor=3.0,
                               name="nccl.scaled." + op_name)
            expected = reduce_expected([d * 0.5 for d in data], "float32",
                                       op_name) * 3.0
            assert_close(host(gpu), expected.astype(np.float32), "float32")
            mpi = hb.allreduce(data[rank], op=OPS[op_name],
                               prescale_factor=0.5, postscale_factor=3.0,
                               name="nccl.scaled.mpi." + op_name)
            same_as_mpi(gpu, mpi, "float32")
        # Integers: integer factors through a pre-multiplied sum ...
        ints = all_rank_data(24, size, (16,), "int32")
        gpu = hb.allreduce(FakeGpuArray(ints[rank]), op=hb.Sum,
                           prescale_factor=2.0, name="nccl.scaled.int")
        assert_close(host(gpu), reduce_expected(ints, "int32", "Sum") * 2,
                     "int32")
        # ... and a fraction is refused with a message naming the type.
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(ints[rank]), op=hb.Sum, prescale_factor=0.5,
            name="nccl.scaled.int.half"), hx.UnsupportedError, "int32",
            "integer factor")
    cases.append(("allreduce/scaling", scaling))

    def fused():
        # 40 tensors of 1..40 KB against a 64 KB fusion threshold: many
        # fused batches, pipelined through the two device fusion buffers,
        # plus tensors larger than the threshold that run alone.
        shapes = [(256 * (i % 10 + 1),) for i in range(40)] + [(40000,)] * 2
        data = [all_rank_data(30 + i, size, s, "float32")
                for i, s in enumerate(shapes)]
        gpu = hb.grouped_allreduce([FakeGpuArray(d[rank]) for d in data],
                                   op=hb.Average, name="nccl.fused")
        mpi = hb.grouped_allreduce([d[rank] for d in data], op=hb.Average,
                                   name="nccl.fused.mpi")
        for g, m, d in zip(gpu, mpi, data):
            assert_close(host(g), reduce_expected(d, "float32", "Average"),
                         "float32")
            same_as_mpi(g, m, "float32")
        # Mixed dtypes in one group fuse per dtype.
        mixed = [all_rank_data(80, size, (100,), "float64"),
                 all_rank_data(81, size, (7, 3), "int32")]
        outs = hb.grouped_allreduce([FakeGpuArray(m[rank]) for m in mixed],
                                    op=hb.Sum, name="nccl.fused.mixed")
        assert_close(host(outs[0]), reduce_expected(mixed[0], "float64",
                                                    "Sum"), "float64")
        assert_close(host(outs[1]), reduce_expected(mixed[1], "int32",
                                                    "Sum"), "int32")
    cases.append(("allreduce/fused", fused))

    def in_place():
        data = all_rank_data(25, size, (33,), "float32")
        x = FakeGpuArray(data[rank])
        out = hb.allreduce_(x, op=hb.Sum, name="nccl.inplace")
        assert out is x
        assert_close(x.numpy(), reduce_expected(data, "float32", "Sum"),
                     "float32")
    cases.append(("allreduce/in-place", in_place))

    def allgather():
        # Uneven first dimensions (rank r has r + 1 rows), then even ones.
        for tag, rows in (("uneven", lambda r: r + 1), ("even", lambda r: 2)):
            data = [all_rank_data(40, size, (rows(r), 3), "float32")[r]
                    for r in range(size)]
            gpu = hb.allgather(FakeGpuArray(data[rank]),
                               name="nccl.allgather." + tag)
            assert_close(host(gpu), np.concatenate(data), "float32")
            same_as_mpi(gpu, hb.allgather(data[rank],
                                          name="nccl.allgather.mpi." + tag),
                        "float32")
    cases.append(("allgather", allgather))

    def broadcast():
        root = size - 1
        data = all_rank_data(41, size, (4, 5), "int64")
        gpu = hb.broadcast(FakeGpuArray(data[rank]), root,
                           name="nccl.broadcast")
        assert_close(host(gpu), data[root], "int64")
        x = FakeGpuArray(data[rank])
        hb.broadcast_(x, 0, name="nccl.broadcast.inplace")
        assert_close(x.numpy(), data[0], "int64")
    cases.append(("broadcast", broadcast))

    def alltoall():
        # Rank r sends (r + p) % 3 rows to rank p.
        splits = [(rank + p) % 3 for p in range(size)]
        data = np.arange(sum(splits) * 2, dtype=np.float32).reshape(-1, 2) \
            + 100 * rank
        gpu, received = hb.alltoall(FakeGpuArray(data), splits=splits,
                                    name="nccl.alltoall")
        mpi, mpi_received = hb.alltoall(data, splits=splits,
                                        name="nccl.alltoall.mpi")
        expected = []
        for p in range(size):
            their = [(p + q) % 3 for q in range(size)]
            start = sum(their[:rank])
            block = (np.arange(sum(their) * 2, dtype=np.float32)
                     .reshape(-1, 2) + 100 * p)[start:start + their[rank]]
            expected.append(block)
        assert_close(host(gpu), np.concatenate(expected), "float32")
        same_as_mpi(gpu, mpi, "float32")
        assert list(received) == list(mpi_received) == [
            (p + rank) % 3 for p in range(size)]
    cases.append(("alltoall", alltoall))

    def reducescatter():
        for tag, rows in (("even", 2 * size), ("uneven", 2 * size + 1)):
            data = all_rank_data(42, size, (rows, 3), "float32")
            gpu = hb.reducescatter(FakeGpuArray(data[rank]), op=hb.Sum,
                                   name="nccl.reducescatter." + tag)
            total = reduce_expected(data, "float32", "Sum")
            mine = rows // size + (1 if rank < rows % size else 0)
            start = sum(rows // size + (1 if r < rows % size else 0)
                        for r in range(rank))
            assert_close(host(gpu), total[start:start + mine], "float32")
            same_as_mpi(gpu, hb.reducescatter(
                data[rank], op=hb.Sum, name="nccl.reducescatter.mpi." + tag),
                "float32")
        # Average: NCCL's own average.
        data = all_rank_data(43, size, (size, 4), "float64")
        gpu = hb.reducescatter(FakeGpuArray(data[rank]), op=hb.Average,
                               name="nccl.reducescatter.avg")
        total = reduce_expected(data, "float64", "Average")
        assert_close(host(gpu), total[rank:rank + 1], "float64")
    cases.append(("reducescatter", reducescatter))

    def stream_ordering():
        # The input is written on a producer stream after a 300 ms sleep;
        # hbcore must wait for that work (the producer orders it before the
        # legacy stream in __dlpack__, and hbcore records its own event
        # there at submission).
        cuda = fake_cuda()
        stream = cuda.stream_create()
        data = all_rank_data(44, size, (1000,), "float32")
        x = FakeGpuArray.empty((1000,), np.float32, stream=stream)
        cuda.sleep_on_stream(stream, 300)
        cuda.memcpy_htod(x.ptr, data[rank], stream)
        gpu = hb.allreduce(x, op=hb.Sum, name="nccl.ordering")
        assert_close(host(gpu), reduce_expected(data, "float32", "Sum"),
                     "float32")
        cuda.stream_synchronize(stream)
        del x
        cuda.stream_destroy(stream)
    cases.append(("stream-ordering", stream_ordering))

    def async_handles():
        data = all_rank_data(45, size, (10,), "float32")
        handles = [hb.allreduce_async(FakeGpuArray(data[rank] + i),
                                      op=hb.Sum, name="nccl.async.%d" % i)
                   for i in range(4)]
        for i, h in enumerate(handles):
            got = host(hb.synchronize(h))
            assert_close(got, reduce_expected([d + i for d in data],
                                              "float32", "Sum"), "float32")
    cases.append(("async", async_handles))

    def process_set():
        # A set with its own NCCL communicator: ranks 0 and size-1 (at 2
        # ranks, rank 1 alone: a set may not repeat the global one).
        members = [0, size - 1] if size > 2 else [1]
        ps = hb.add_process_set(members)
        try:
            data = all_rank_data(46, size, (6,), "float32")
            if rank in members:
                gpu = hb.allreduce(FakeGpuArray(data[rank]), op=hb.Sum,
                                   name="nccl.set", process_set=ps)
                assert_close(host(gpu), reduce_expected(
                    [data[m] for m in members], "float32", "Sum"), "float32")
        finally:
            hb.remove_process_set(ps)
    cases.append(("process-set", process_set))

    def join():
        # The last rank joins; the others' GPU allreduce runs with device
        # zeros standing in for it, on its own GPU's communicator.
        joiner = size - 1
        data = all_rank_data(49, size, (6,), "float32")
        if rank == joiner:
            last = hb.join()
        else:
            gpu = hb.allreduce(FakeGpuArray(data[rank]), op=hb.Sum,
                               name="nccl.join")
            assert_close(host(gpu), reduce_expected(
                [data[r] for r in range(size) if r != joiner], "float32",
                "Sum"), "float32")
            last = hb.join()
        # The joiner joined first: one of the others joined last.
        if last not in [r for r in range(size) if r != joiner]:
            raise CaseFailure("join() returned %r, the first to join" % last)
    cases.append(("join", join))

    def refusals():
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(np.ones(3, np.int16)), name="nccl.int16"),
            hx.UnsupportedError, "int16")
        # Each rank drives one GPU: a tensor on another device is refused
        # on every rank (all ranks submit it on their second device).
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(np.ones(3, np.float32), device=1),
            name="nccl.other-device"),
            hx.InvalidArgumentError, "one GPU per process", "GPU 1")
        # The runtime keeps working.
        data = all_rank_data(47, size, (3,), "float32")
        gpu = hb.allreduce(FakeGpuArray(data[rank]), op=hb.Sum,
                           name="nccl.after-refusals")
        assert_close(host(gpu), reduce_expected(data, "float32", "Sum"),
                     "float32")
    cases.append(("refusals", refusals))

    def no_leaks():
        # Outputs and inputs are freed once their Python objects go; only
        # the backend's own buffers (fusion, scratch) stay allocated.
        cuda = fake_cuda()
        data = all_rank_data(48, size, (50,), "float32")

        def round_trip():
            outs = hb.grouped_allreduce(
                [FakeGpuArray(data[rank]) for _ in range(3)],
                name="nccl.leaks")
            g = hb.allgather(FakeGpuArray(data[rank]), name="nccl.leaks.ag")
            del outs, g
            gc.collect()
        round_trip()
        before = cuda.live_allocations()
        for _ in range(3):
            round_trip()
        after = cuda.live_allocations()
        if after != before:
            raise CaseFailure("device allocations grew from %d to %d"
                              % (before, after))
    cases.append(("no-leaks", no_leaks))
    return cases


def failure_cases(rank, size):
    fail_rank = int(os.environ["FAKE_NCCL_FAIL_RANK"])
    fail_at = int(os.environ["FAKE_NCCL_FAIL_AT"])
    data = all_rank_data(50, size, (8,), "float32")

    def injected():
        # Collectives before the injected one work ...
        for i in range(fail_at - 1):
            gpu = hb.allreduce(FakeGpuArray(data[rank]), op=hb.Sum,
                               name="nccl.before.%d" % i)
            assert_close(host(gpu), reduce_expected(data, "float32", "Sum"),
                         "float32")
        # ... the injected one fails on every rank, naming the rank.
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(data[rank]), op=hb.Sum, name="nccl.injected"),
            hx.HbcoreError, "rank %d" % fail_rank, "NCCL")

    def cpu_still_works():
        out = hb.allreduce(data[rank], op=hb.Sum, name="nccl.cpu-after")
        assert_close(out, reduce_expected(data, "float32", "Sum"), "float32")

    def gpu_fails_fast():
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(data[rank]), op=hb.Sum, name="nccl.after"),
            hx.HbcoreError, "aborted")

    return [("failure/injected", injected),
            ("failure/cpu-still-works", cpu_still_works),
            ("failure/gpu-fails-fast", gpu_fails_fast)]


def missing_cases(rank, size):
    data = all_rank_data(60, size, (4,), "float32")

    def refused():
        assert not hb.nccl_built()
        expect_raises(lambda: hb.allreduce(FakeGpuArray(data[rank]),
                                           name="nccl.missing"),
                      hx.UnsupportedError, "cannot load the NCCL library",
                      os.environ["HB_NCCL_LIBRARY"])

    def cpu_works():
        out = hb.allreduce(data[rank], op=hb.Sum, name="nccl.missing.cpu")
        assert_close(out, reduce_expected(data, "float32", "Sum"), "float32")

    return [("missing/refused", refused), ("missing/cpu-works", cpu_works)]


# The fake's PCI bus id of device 0 when processes share devices.
SHARED_GPU0 = "00000000:01:00.0"


def shared_cases(rank, size):
    device = hb.local_rank() % 2
    data = all_rank_data(70, size, (5,), "float32")

    def refused():
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(data[rank], device=device), name="nccl.shared"),
            hx.UnsupportedError, "ranks 0 and 2 are on the same GPU",
            "PCI bus id %s" % SHARED_GPU0,
            "NCCL cannot run two ranks of a communicator on one GPU")

    def distinct_set_works():
        members = [0, 1]
        ps = hb.add_process_set(members)
        try:
            if rank in members:
                gpu = hb.allreduce(FakeGpuArray(data[rank], device=device),
                                   op=hb.Sum, name="nccl.shared.set",
                                   process_set=ps)
                assert_close(host(gpu), reduce_expected(
                    [data[m] for m in members], "float32", "Sum"), "float32")
        finally:
            hb.remove_process_set(ps)

    def cpu_works():
        out = hb.allreduce(data[rank], op=hb.Sum, name="nccl.shared.cpu")
        assert_close(out, reduce_expected(data, "float32", "Sum"), "float32")

    def refused_again():
        expect_raises(lambda: hb.allreduce(
            FakeGpuArray(data[rank], device=device), name="nccl.shared.2"),
            hx.UnsupportedError, "ranks 0 and 2 are on the same GPU")

    return [("shared/refused", refused),
            ("shared/distinct-set-works", distinct_set_works),
            ("shared/cpu-works", cpu_works),
            ("shared/refused-again", refused_again)]


def main() -> None:
    mode = sys.argv[1]
    hb.init()
    rank, size = hb.rank(), hb.size()
    checker = Checker(rank)
    cases = {"collectives": collective_cases, "failure": failure_cases,
             "missing": missing_cases, "shared": shared_cases}[mode](rank,
                                                                    size)
    for name, fn in cases:
        checker.run(name, fn)
    report({"size": size, "nccl_built": hb.nccl_built(),
            "cases": [name for name, _ in cases]})
    hb.shutdown()


if __name__ == "__main__":
    main()
