// Memory where a backend's buffers live: host memory for MPI, one GPU's
// memory for NCCL. The executor and the allreduce pipeline make every
// allocation, copy, fill and scaling of tensor data through the Memory of
// the backend that serves the batch, so they never assume host memory.
//
// Operations may be asynchronous (queued on the backend's stream); they are
// ordered among themselves and with the backend's collectives, and
// Synchronize() returns once all of them are complete.
#ifndef HBCORE_BACKENDS_MEMORY_H_
#define HBCORE_BACKENDS_MEMORY_H_

#include <cstdint>

#include "common/status.h"
#include "common/types.h"

namespace hbcore {

class Memory {
 public:
  virtual ~Memory() = default;
  // Null when the allocation fails. Aligned to at least 64 bytes.
  virtual void* Allocate(int64_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual Status Copy(void* dst, const void* src, int64_t bytes) = 0;
  virtual Status Zero(void* dst, int64_t bytes) = 0;
  // dst[i] = src[i] * factor (see scaling.h for the semantics of integer
  // and bool types); dst may equal src; factor 1 is a plain copy.
  virtual Status ScaledCopy(void* dst, const void* src, int64_t count,
                            DataType dtype, double factor) = 0;
  virtual Status Synchronize() { return Status::OK(); }
};

// Host blocks (hb_host_malloc): 64-byte aligned; from kHugePageBytes up
// aligned to it and advised onto transparent huge pages, which MPI's
// single-copy transfers between processes pin and read much faster than
// 4 KiB pages. Null when memory ran out. FreeHost(nullptr) is a no-op.
constexpr int64_t kHugePageBytes = int64_t{2} << 20;
void* AllocateHost(int64_t bytes);
void FreeHost(void* ptr);

// Host memory: synchronous memcpy, memset and ScaledCopy.
class HostMemory : public Memory {
 public:
  void* Allocate(int64_t bytes) override;
  void Free(void* ptr) override;
  Status Copy(void* dst, const void* src, int64_t bytes) override;
  Status Zero(void* dst, int64_t bytes) override;
  Status ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                    double factor) override;
};

// A buffer of some Memory that grows on demand; its contents are not kept
// when it grows. It is reallocated when asked for under another Memory (a
// batch of another backend), and freed by its destructor.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer() { Release(); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  // At least max(bytes, 1) bytes of `memory`; null when allocation fails.
  void* Get(Memory* memory, int64_t bytes);
  void Release();

 private:
  Memory* memory_ = nullptr;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_MEMORY_H_
