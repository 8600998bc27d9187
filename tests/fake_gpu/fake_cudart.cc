// libfakecudart.so: a fake of the CUDA runtime entry points hbcore loads
// (csrc/core/src/gpu/gpu_abi.h), working on host memory, so the NCCL path can
// run in CI without a GPU. Built by tests/fake_gpu/build.py.
//
// Model:
// - Devices: FAKE_CUDA_DEVICES (default 2) devices; cudaSetDevice /
//   cudaGetDevice are per thread (default 0). Each process has devices of
//   its own (their PCI bus ids hold its pid), as under a launcher that
//   gives every process its own CUDA_VISIBLE_DEVICES; with
//   FAKE_CUDA_SHARED_DEVICES=1, device k is one device of the machine in
//   every process (its bus id depends on k only). Device memory is 64-byte
//   aligned host memory from a registry; it is filled with 0xff bytes on
//   cudaMalloc (real device memory is not cleared either: code that reads
//   before writing sees NaN / -1, not a lucky 0).
// - Streams: every created stream is a StreamWorker thread running its
//   tasks in FIFO order. NULL, cudaStreamLegacy (0x1) and
//   cudaStreamPerThread (0x2) all name one process-wide legacy stream,
//   which does not implicitly synchronize with the other streams (real
//   blocking streams would).
// - Copies and memsets are stream tasks; the copy kind is checked against
//   the registry (a HostToDevice copy must target device memory, ...), as
//   the real runtime rejects wrong kinds. cudaMemcpy runs on the legacy
//   stream and waits for it.
// - cudaFree forgets the pointer at once (later calls using it fail), but
//   the memory itself lives until every stream has run the work enqueued
//   before the free (a marker task on each busy stream holds it), so queued
//   work never touches freed memory. The real cudaFree blocks until the
//   device is idle instead; the fake does not, so a test whose collective
//   is stuck cannot hang in a destructor that frees memory.
// - Events: see EventCapture in fake_worker.h.
// - Handles are never reused; a stale or unknown stream or event handle is
//   cudaErrorInvalidResourceHandle instead of a crash.
// Every entry point is thread-safe.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "fake_handles.h"
#include "fake_stream.h"
#include "fake_worker.h"
#include "gpu/gpu_abi.h"

using hbcore::cudaError_t;
using hbcore::cudaEvent_t;
using hbcore::cudaStream_t;

namespace {

constexpr cudaError_t kSuccess = 0;
constexpr cudaError_t kErrorInvalidValue = 1;
constexpr cudaError_t kErrorMemoryAllocation = 2;
constexpr cudaError_t kErrorNoDevice = 100;
constexpr cudaError_t kErrorInvalidDevice = 101;
constexpr cudaError_t kErrorInvalidResourceHandle = 400;
constexpr cudaError_t kErrorNotReady = 600;

constexpr int kDefaultDevices = 2;
constexpr int kRuntimeVersion = 12040;
constexpr size_t kAlignment = 64;

// cudaMemcpyKind
constexpr int kHostToHost = 0;
constexpr int kHostToDevice = 1;
constexpr int kDeviceToHost = 2;
constexpr int kDeviceToDevice = 3;
constexpr int kDefault = 4;

// ---- devices ----

// Read at every call, so a test may change it between calls.
int DeviceCount() {
  const char* text = std::getenv("FAKE_CUDA_DEVICES");
  if (text == nullptr || *text == '\0') return kDefaultDevices;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1024) {
    std::fprintf(stderr, "fake cudart: bad FAKE_CUDA_DEVICES=%s, using %d\n",
                 text, kDefaultDevices);
    return kDefaultDevices;
  }
  return static_cast<int>(value);
}

thread_local int t_device = 0;

// FAKE_CUDA_SHARED_DEVICES=1 (read at every call).
bool SharedDevices() {
  const char* text = std::getenv("FAKE_CUDA_SHARED_DEVICES");
  return text != nullptr && std::strcmp(text, "1") == 0;
}

// ---- memory ----

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct Allocation {
  std::unique_ptr<void, FreeDeleter> memory;
  size_t bytes;
};

class AllocationTable {
 public:
  void* Allocate(size_t bytes) {
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    std::unique_ptr<void, FreeDeleter> memory(
        std::aligned_alloc(kAlignment, rounded));
    if (!memory) return nullptr;
    std::memset(memory.get(), 0xff, rounded);
    void* p = memory.get();
    std::lock_guard<std::mutex> lock(mu_);
    allocations_.emplace(reinterpret_cast<uintptr_t>(p),
                         Allocation{std::move(memory), bytes});
    return p;
  }

  // Removes the allocation and hands it over (null when unknown).
  std::shared_ptr<Allocation> Take(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end()) return nullptr;
    auto taken = std::make_shared<Allocation>(std::move(it->second));
    allocations_.erase(it);
    return taken;
  }

  // True when [p, p + bytes) lies inside one allocation.
  bool Covers(const void* p, size_t bytes) {
    uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.upper_bound(begin);
    if (it == allocations_.begin()) return false;
    --it;
    uintptr_t start = it->first;
    return begin - start <= it->second.bytes &&
           bytes <= it->second.bytes - (begin - start);
  }

  size_t Live() {
    std::lock_guard<std::mutex> lock(mu_);
    return allocations_.size();
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, Allocation> allocations_;  // keyed by start address
};

AllocationTable& Allocations() {
  static fakegpu::NoDestructor<AllocationTable> table;
  return *table;
}

// ---- streams and events ----

struct Stream {
  explicit Stream(int dev) : device(dev) {}
  const int device;
  fakegpu::StreamWorker worker;
};

struct Event {
  std::mutex mu;
  std::shared_ptr<fakegpu::EventCapture> capture;  // null: never recorded
};

fakegpu::HandleTable<Stream>& Streams() {
  static fakegpu::NoDestructor<fakegpu::HandleTable<Stream>> table(
      uintptr_t{0x5f0000000000});
  return *table;
}

fakegpu::HandleTable<Event>& Events() {
  static fakegpu::NoDestructor<fakegpu::HandleTable<Event>> table(
      uintptr_t{0x5e0000000000});
  return *table;
}

const std::shared_ptr<Stream>& LegacyStream() {
  static fakegpu::NoDestructor<std::shared_ptr<Stream>> legacy(
      std::make_shared<Stream>(0));
  return *legacy;
}

// NULL, cudaStreamLegacy and cudaStreamPerThread are the legacy stream;
// null result: unknown handle.
std::shared_ptr<Stream> ResolveStream(cudaStream_t stream) {
  uintptr_t handle = reinterpret_cast<uintptr_t>(stream);
  if (handle <= 2) return LegacyStream();
  return Streams().Find(handle);
}

std::shared_ptr<Event> ResolveEvent(cudaEvent_t event) {
  return Events().Find(reinterpret_cast<uintptr_t>(event));
}

// Waits for everything enqueued on every stream before the call.
void SynchronizeAllStreams() {
  std::vector<std::shared_ptr<Stream>> streams = Streams().All();
  streams.push_back(LegacyStream());
  std::vector<uint64_t> tails;
  tails.reserve(streams.size());
  for (auto& s : streams) tails.push_back(s->worker.Tail());
  for (size_t i = 0; i < streams.size(); ++i) {
    if (!streams[i]->worker.OnWorkerThread()) {
      streams[i]->worker.WaitFor(tails[i]);
    }
  }
}

cudaError_t CheckCopy(void* dst, const void* src, size_t bytes, int kind) {
  if (kind < kHostToHost || kind > kDefault) return kErrorInvalidValue;
  if (bytes == 0) return kSuccess;
  if (dst == nullptr || src == nullptr) return kErrorInvalidValue;
  bool dst_device = kind == kHostToDevice || kind == kDeviceToDevice;
  bool src_device = kind == kDeviceToHost || kind == kDeviceToDevice;
  if (dst_device && !Allocations().Covers(dst, bytes)) {
    return kErrorInvalidValue;
  }
  if (src_device && !Allocations().Covers(src, bytes)) {
    return kErrorInvalidValue;
  }
  return kSuccess;
}

}  // namespace

// ---- the CUDA runtime ABI ----

FAKE_GPU_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return kErrorInvalidValue;
  *count = DeviceCount();
  return *count == 0 ? kErrorNoDevice : kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaSetDevice(int device) {
  int count = DeviceCount();
  if (count == 0) return kErrorNoDevice;
  if (device < 0 || device >= count) return kErrorInvalidDevice;
  t_device = device;
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return kErrorInvalidValue;
  if (DeviceCount() == 0) return kErrorNoDevice;
  *device = t_device;
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len,
                                                  int device) {
  if (bus_id == nullptr || len <= 0) return kErrorInvalidValue;
  const int count = DeviceCount();
  if (count == 0) return kErrorNoDevice;
  if (device < 0 || device >= count) return kErrorInvalidDevice;
  // domain:bus:device.function; the domain tells the processes apart
  // unless they share the machine's devices.
  const unsigned domain =
      SharedDevices() ? 0u : static_cast<unsigned>(::getpid());
  const int n = std::snprintf(bus_id, static_cast<size_t>(len),
                              "%08x:%02x:00.0", domain, device + 1);
  return n < 0 || n >= len ? kErrorInvalidValue : kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return kErrorInvalidValue;
  *version = kRuntimeVersion;
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return kErrorInvalidValue;
  if (DeviceCount() == 0) return kErrorNoDevice;
  if (bytes == 0) {
    *ptr = nullptr;
    return kSuccess;
  }
  void* p = Allocations().Allocate(bytes);
  if (p == nullptr) return kErrorMemoryAllocation;
  *ptr = p;
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return kSuccess;
  std::shared_ptr<Allocation> memory = Allocations().Take(ptr);
  if (!memory) return kErrorInvalidValue;
  // Each busy stream holds the memory until it reaches this point; the
  // last reference released frees it.
  std::vector<std::shared_ptr<Stream>> streams = Streams().All();
  streams.push_back(LegacyStream());
  for (auto& s : streams) {
    if (!s->worker.Idle()) s->worker.Enqueue([memory] {});
  }
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src,
                                            size_t bytes, int kind,
                                            cudaStream_t stream) {
  cudaError_t err = CheckCopy(dst, src, bytes, kind);
  if (err != kSuccess) return err;
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  if (bytes == 0) return kSuccess;
  s->worker.Enqueue([=] { std::memmove(dst, src, bytes); });
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src,
                                       size_t bytes, int kind) {
  cudaError_t err = CheckCopy(dst, src, bytes, kind);
  if (err != kSuccess) return err;
  if (bytes == 0) return kSuccess;
  const std::shared_ptr<Stream>& s = LegacyStream();
  uint64_t ticket =
      s->worker.Enqueue([=] { std::memmove(dst, src, bytes); });
  s->worker.WaitFor(ticket);
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaMemsetAsync(void* ptr, int value,
                                            size_t bytes,
                                            cudaStream_t stream) {
  if (bytes != 0 && !Allocations().Covers(ptr, bytes)) {
    return kErrorInvalidValue;
  }
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  if (bytes == 0) return kSuccess;
  s->worker.Enqueue([=] { std::memset(ptr, value, bytes); });
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream,
                                                      unsigned flags) {
  if (stream == nullptr || (flags & ~hbcore::kCudaStreamNonBlocking) != 0) {
    return kErrorInvalidValue;
  }
  uintptr_t handle = Streams().Add(std::make_shared<Stream>(t_device));
  *stream = reinterpret_cast<cudaStream_t>(handle);
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

FAKE_GPU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  uintptr_t handle = reinterpret_cast<uintptr_t>(stream);
  if (handle <= 2) return kErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s = Streams().Remove(handle);
  if (!s) return kErrorInvalidResourceHandle;
  // The last reference runs the queued work and joins the worker; a
  // thread still using the stream keeps it alive until it is done.
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  if (s->worker.OnWorkerThread()) return kErrorInvalidValue;  // deadlock
  s->worker.WaitFor(s->worker.Tail());
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  return s->worker.Idle() ? kSuccess : kErrorNotReady;
}

FAKE_GPU_EXPORT cudaError_t cudaDeviceSynchronize() {
  SynchronizeAllStreams();
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event,
                                                     unsigned flags) {
  // cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess
  constexpr unsigned kKnownFlags = 0x1 | 0x2 | 0x4;
  if (event == nullptr || (flags & ~kKnownFlags) != 0) {
    return kErrorInvalidValue;
  }
  uintptr_t handle = Events().Add(std::make_shared<Event>());
  *event = reinterpret_cast<cudaEvent_t>(handle);
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  // A wait already enqueued on the event holds its capture, so destroying
  // the event right after cudaStreamWaitEvent is fine (as in CUDA).
  return Events().Remove(reinterpret_cast<uintptr_t>(event))
             ? kSuccess
             : kErrorInvalidResourceHandle;
}

FAKE_GPU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event,
                                            cudaStream_t stream) {
  std::shared_ptr<Event> e = ResolveEvent(event);
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!e || !s) return kErrorInvalidResourceHandle;
  auto capture = std::make_shared<fakegpu::EventCapture>();
  std::lock_guard<std::mutex> lock(e->mu);
  s->worker.Enqueue([capture] { capture->Complete(); });
  e->capture = capture;
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::shared_ptr<Event> e = ResolveEvent(event);
  if (!e) return kErrorInvalidResourceHandle;
  std::shared_ptr<fakegpu::EventCapture> capture;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    capture = e->capture;
  }
  return !capture || capture->Done() ? kSuccess : kErrorNotReady;
}

FAKE_GPU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::shared_ptr<Event> e = ResolveEvent(event);
  if (!e) return kErrorInvalidResourceHandle;
  std::shared_ptr<fakegpu::EventCapture> capture;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    capture = e->capture;
  }
  if (capture) capture->Wait();
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream,
                                                cudaEvent_t event,
                                                unsigned flags) {
  if (flags != 0) return kErrorInvalidValue;
  std::shared_ptr<Event> e = ResolveEvent(event);
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!e || !s) return kErrorInvalidResourceHandle;
  std::shared_ptr<fakegpu::EventCapture> capture;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    capture = e->capture;
  }
  if (capture) s->worker.Enqueue([capture] { capture->Wait(); });
  return kSuccess;
}

FAKE_GPU_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case kSuccess: return "cudaSuccess: no error";
    case kErrorInvalidValue: return "cudaErrorInvalidValue: invalid argument";
    case kErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation: out of memory";
    case kErrorNoDevice:
      return "cudaErrorNoDevice: no CUDA-capable device is detected";
    case kErrorInvalidDevice:
      return "cudaErrorInvalidDevice: invalid device ordinal";
    case kErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle: invalid resource handle";
    case kErrorNotReady: return "cudaErrorNotReady: device not ready";
    default: return "unrecognized error code";
  }
}

// ---- fake-only hooks (fake_stream.h) ----

FAKE_GPU_EXPORT cudaError_t fakeCudaLaunchHostFunc(cudaStream_t stream,
                                                   fakeCudaHostFn fn,
                                                   void* arg) {
  if (fn == nullptr) return kErrorInvalidValue;
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  s->worker.Enqueue([fn, arg] { fn(arg); });
  return kSuccess;
}

FAKE_GPU_EXPORT cudaError_t fakeCudaStreamSleep(cudaStream_t stream, int ms) {
  if (ms < 0) return kErrorInvalidValue;
  std::shared_ptr<Stream> s = ResolveStream(stream);
  if (!s) return kErrorInvalidResourceHandle;
  s->worker.Enqueue(
      [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
  return kSuccess;
}

FAKE_GPU_EXPORT size_t fakeCudaLiveAllocations(void) {
  return Allocations().Live();
}

FAKE_GPU_EXPORT int fakeCudaIsDevicePointer(const void* ptr, size_t bytes) {
  return Allocations().Covers(ptr, bytes) ? 1 : 0;
}

// The fake's signatures are those hbcore's function-pointer types expect
// (GCC and Clang ignore language linkage in function types).
#define FAKE_CHECK_ABI(name)                                              \
  static_assert(std::is_same<decltype(&name), hbcore::name##_fn>::value, \
                #name " does not match gpu_abi.h")
FAKE_CHECK_ABI(cudaGetDeviceCount);
FAKE_CHECK_ABI(cudaSetDevice);
FAKE_CHECK_ABI(cudaGetDevice);
FAKE_CHECK_ABI(cudaDeviceGetPCIBusId);
FAKE_CHECK_ABI(cudaRuntimeGetVersion);
FAKE_CHECK_ABI(cudaMalloc);
FAKE_CHECK_ABI(cudaFree);
FAKE_CHECK_ABI(cudaMemcpyAsync);
FAKE_CHECK_ABI(cudaMemsetAsync);
FAKE_CHECK_ABI(cudaStreamCreateWithFlags);
FAKE_CHECK_ABI(cudaStreamDestroy);
FAKE_CHECK_ABI(cudaStreamSynchronize);
FAKE_CHECK_ABI(cudaStreamQuery);
FAKE_CHECK_ABI(cudaStreamWaitEvent);
FAKE_CHECK_ABI(cudaEventCreateWithFlags);
FAKE_CHECK_ABI(cudaEventDestroy);
FAKE_CHECK_ABI(cudaEventRecord);
FAKE_CHECK_ABI(cudaEventQuery);
FAKE_CHECK_ABI(cudaGetErrorString);
#undef FAKE_CHECK_ABI
