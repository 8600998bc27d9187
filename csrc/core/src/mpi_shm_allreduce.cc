#include "mpi_shm_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "mpi_wait.h"
#include "reduce_kernels.h"

namespace hbcore {
namespace {

constexpr int64_t kSlotAlign = 4096;
constexpr int kNameBytes = 64;
constexpr int64_t kScratchBytes = 16384;

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Node rank 0 creates and sizes the object; an empty error means success.
std::string CreateObject(const char* name, size_t bytes) {
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open");
  std::string error;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    error = Errno("ftruncate");
  } else if (int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes))) {
    error = std::string("posix_fallocate: ") + std::strerror(rc);
  }
  close(fd);
  if (!error.empty()) shm_unlink(name);
  return error;
}

std::string MapObject(const char* name, size_t bytes, void** mapping) {
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return Errno("shm_open");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Errno("mmap");
  *mapping = p;
  return "";
}

}  // namespace

Status MpiShmAllreduce::Create(MPI_Comm node, int64_t slot_bytes,
                               std::unique_ptr<MpiShmAllreduce>* out) {
  std::unique_ptr<MpiShmAllreduce> shm(new MpiShmAllreduce());
  int rc = MPI_Comm_dup(node, &shm->comm_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Comm_dup");
  MPI_Comm_set_errhandler(shm->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(shm->comm_, &shm->rank_);
  MPI_Comm_size(shm->comm_, &shm->size_);
  // Node rank 0's size rules, so that every rank maps the same segment even
  // before init compares the settings (and fails if they differ).
  rc = MPI_Bcast(&slot_bytes, 1, MPI_INT64_T, 0, shm->comm_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Bcast");
  if (slot_bytes <= 0) return Status::Unsupported("disabled");
  shm->slot_bytes_ = (slot_bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  shm->mapping_bytes_ = static_cast<size_t>(shm->slot_bytes_) * shm->size_;

  // Rank 0 names and creates the object; the name travels with a flag.
  char name[kNameBytes] = {0};
  std::string error;
  if (shm->rank_ == 0) {
    static std::atomic<int> serial{0};
    std::snprintf(name, sizeof(name), "/hbcore-%d-%d", static_cast<int>(getpid()),
                  serial++);
    error = CreateObject(name, shm->mapping_bytes_);
    if (!error.empty()) name[0] = '\0';
  }
  rc = MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, shm->comm_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Bcast");
  if (name[0] != '\0') {
    error = MapObject(name, shm->mapping_bytes_, &shm->mapping_);
  } else if (error.empty()) {
    error = "node rank 0 could not create the segment";
  }
  // Everyone mapped it (or someone failed): then the name can go.
  int ok = error.empty() ? 1 : 0;
  int all_ok = 0;
  rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, shm->comm_);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce");
  if (shm->rank_ == 0 && name[0] != '\0') shm_unlink(name);
  if (!all_ok) {
    return Status::Internal(
        "node shared-memory segment of " + std::to_string(shm->mapping_bytes_) +
        " bytes unavailable" + (error.empty() ? "" : " (" + error + ")"));
  }
  char* base = static_cast<char*>(shm->mapping_);
  for (int r = 0; r < shm->size_; ++r) {
    shm->slots_.push_back(base + static_cast<int64_t>(r) * shm->slot_bytes_);
  }
  *out = std::move(shm);
  return Status::OK();
}

MpiShmAllreduce::~MpiShmAllreduce() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiShmAllreduce::Barrier() {
  // The fences order this rank's plain stores and loads of the segment
  // against the barrier's own synchronisation.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  int rc = MPI_Barrier(comm_);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return MpiStatus(rc, "MPI_Barrier");
}

Status MpiShmAllreduce::Allreduce(int64_t count, DataType dtype, ReduceOp op) {
  const int64_t elem = DataTypeSize(dtype);
  // Every rank fails the same way here, before any barrier.
  if (!ReduceInto(nullptr, nullptr, 0, dtype, op)) {
    return Status::Unsupported(std::string("reduce op ") + ReduceOpName(op) +
                               " on " + DataTypeName(dtype) +
                               " in shared memory");
  }
  Status s = Barrier();  // every slot holds its rank's input
  if (!s.ok()) return s;
  const int64_t begin = count * rank_ / size_;
  const int64_t n = count * (rank_ + 1) / size_ - begin;
  const int64_t offset = begin * elem;
  // Elements are combined in rank order (slot 0 op slot 1 op ...), block
  // by block through a small scratch buffer: the result of every element is
  // then the same whichever rank's chunk it falls in, so it does not depend
  // on how a batch was fused (floating-point sums are order-sensitive).
  alignas(64) char scratch[kScratchBytes];
  const int64_t block = kScratchBytes / elem;
  for (int64_t done = 0; done < n; done += block) {
    const int64_t m = std::min(block, n - done);
    const int64_t at = offset + done * elem;
    std::memcpy(scratch, slots_[0] + at, m * elem);
    for (int r = 1; r < size_; ++r) ReduceInto(scratch, slots_[r] + at, m, dtype, op);
    for (int r = 0; r < size_; ++r) std::memcpy(slots_[r] + at, scratch, m * elem);
  }
  return Barrier();  // every chunk is everywhere
}

}  // namespace hbcore
