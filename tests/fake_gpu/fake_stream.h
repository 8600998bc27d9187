// The fake-only C entry points that libfakecudart exports besides the CUDA
// runtime ABI of csrc/core/src/gpu/gpu_abi.h. libfakenccl uses
// fakeCudaLaunchHostFunc to put its collectives on a stream; tests use the
// others (through ctypes, see fake_array.py) to delay streams and to check
// for leaks and for device pointers.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_STREAM_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_STREAM_H_

#include <cstddef>

#include "gpu/gpu_abi.h"

#define FAKE_GPU_EXPORT extern "C" __attribute__((visibility("default")))

// A host function run by a stream's worker thread, in stream order.
typedef void (*fakeCudaHostFn)(void* arg);

// Modelled on cudaLaunchHostFunc: enqueues fn(arg) on the stream (NULL, 0x1
// and 0x2 name the legacy default stream). fn runs exactly once if this
// returns 0 (cudaSuccess), never otherwise; it may block (a collective
// waiting for its peers), which holds up the stream like a kernel would.
FAKE_GPU_EXPORT hbcore::cudaError_t fakeCudaLaunchHostFunc(
    hbcore::cudaStream_t stream, fakeCudaHostFn fn, void* arg);

// Enqueues a sleep of `ms` milliseconds on the stream: work enqueued after
// it runs at least that much later, so a test can prove that a consumer
// really waits for a producer.
FAKE_GPU_EXPORT hbcore::cudaError_t fakeCudaStreamSleep(
    hbcore::cudaStream_t stream, int ms);

// The number of cudaMalloc allocations not yet freed (leak checks).
FAKE_GPU_EXPORT size_t fakeCudaLiveAllocations(void);

// 1 when [ptr, ptr + bytes) lies inside one live cudaMalloc allocation,
// else 0. libfakenccl checks collective buffers with it (as NCCL does with
// NCCL_CHECK_POINTERS=1), so a host pointer handed to NCCL is an error in
// the fake instead of a crash on a real GPU.
FAKE_GPU_EXPORT int fakeCudaIsDevicePointer(const void* ptr, size_t bytes);

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_STREAM_H_
