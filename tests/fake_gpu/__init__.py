"""A fake of the CUDA runtime and NCCL on host memory, for testing hbcore's
NCCL path on machines without a GPU (see README.md in this directory).

- build.py: build() compiles libfakecudart.so and libfakenccl.so.
- fake_array.py: FakeCuda (the runtime through ctypes), FakeGpuArray (a
  DLPack-exporting fake CUDA array), from_dlpack_capsule.
- nccl_ctypes.py: FakeNccl (the fake NCCL through ctypes).
"""
