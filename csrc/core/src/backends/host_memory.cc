#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/memory.h"
#include "backends/scaling.h"

namespace hbcore {

void* AllocateHost(int64_t bytes) {
  // aligned_alloc wants the size to be a multiple of the alignment.
  const int64_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const int64_t rounded = (std::max<int64_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(static_cast<size_t>(align),
                               static_cast<size_t>(rounded));
  // Advice only: where the kernel refuses it (THP disabled), the block
  // stays on 4 KiB pages and works the same.
  if (p != nullptr && align == kHugePageBytes) {
    madvise(p, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  }
  return p;
}

void FreeHost(void* ptr) { std::free(ptr); }

void* HostMemory::Allocate(int64_t bytes) { return AllocateHost(bytes); }

void HostMemory::Free(void* ptr) { FreeHost(ptr); }

Status HostMemory::Copy(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  return Status::OK();
}

Status HostMemory::Zero(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
  return Status::OK();
}

Status HostMemory::ScaledCopy(void* dst, const void* src, int64_t count,
                              DataType dtype, double factor) {
  hbcore::ScaledCopy(dst, src, count, dtype, factor);
  return Status::OK();
}

void* ScratchBuffer::Get(Memory* memory, int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 1);
  if (memory != memory_ || bytes > bytes_) {
    Release();
    ptr_ = memory->Allocate(bytes);
    if (ptr_ == nullptr) return nullptr;
    memory_ = memory;
    bytes_ = bytes;
  }
  return ptr_;
}

void ScratchBuffer::Release() {
  if (ptr_ != nullptr) memory_->Free(ptr_);
  memory_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace hbcore
