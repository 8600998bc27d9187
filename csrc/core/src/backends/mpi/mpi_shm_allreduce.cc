#include "backends/mpi/mpi_shm_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/reduce_kernels.h"
#include "common/mpi_wait.h"

namespace hbcore {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kSlotAlign = 4096;
constexpr int kNameBytes = 64;
// Step 2 combines this many bytes at a time, in two cache-resident buffers.
constexpr int64_t kBlockBytes = 16384;

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
  // n input slots, then the result area.
  shm->mapping_bytes_ = static_cast<size_t>(shm->slot_bytes_) * (shm->size_ + 1);

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
  shm->result_ = base + static_cast<int64_t>(shm->size_) * shm->slot_bytes_;
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

Status MpiShmAllreduce::Allreduce(const FusedLayout& layout, ReduceOp op,
                                  const PhaseFn& phase, const ChunkFn* across) {
  const int64_t total = layout.total();
  const int64_t piece_elements = slot_bytes_ / layout.element_size();
  // The timeline gets the three steps of a batch that is one piece; for
  // more pieces they interleave, and it gets one ALLREDUCE for the whole.
  const bool one_piece = total <= piece_elements;
  const auto first = Clock::now();
  for (int64_t piece = 0; piece < total; piece += piece_elements) {
    const int64_t piece_end = std::min(total, piece + piece_elements);
    const int64_t n = piece_end - piece;
    const int64_t begin = piece + n * rank_ / size_;
    const int64_t end = piece + n * (rank_ + 1) / size_;
    auto start = Clock::now();
    PackPeerChunks(layout, piece, piece_end, begin, end);
    if (one_piece) phase("MEMCPY_IN_FUSION_BUFFER", start);
    start = Clock::now();
    Status s = Barrier();  // every slot holds what the peers need of it
    if (!s.ok()) return s;
    CombineOwnChunk(layout, op, piece, begin, end, across != nullptr);
    if (across != nullptr) {
      char* chunk = result_ + (begin - piece) * layout.element_size();
      s = (*across)(chunk, end - begin);
      if (!s.ok()) return s;
      layout.Scatter(begin, end - begin, chunk);
    }
    s = Barrier();  // every chunk of the result area is written
    if (!s.ok()) return s;
    if (one_piece) phase("ALLREDUCE", start);
    start = Clock::now();
    UnpackPeerChunks(layout, piece, piece_end, begin, end);
    if (one_piece) phase("MEMCPY_OUT_FUSION_BUFFER", start);
  }
  if (!one_piece) phase("ALLREDUCE", first);
  return Status::OK();
}

void MpiShmAllreduce::PackPeerChunks(const FusedLayout& layout, int64_t piece,
                                     int64_t piece_end, int64_t begin,
                                     int64_t end) {
  char* slot = slots_[rank_];
  const int64_t elem = layout.element_size();
  layout.Gather(piece, begin - piece, slot);
  layout.Gather(end, piece_end - end, slot + (end - piece) * elem);
}

void MpiShmAllreduce::CombineOwnChunk(const FusedLayout& layout, ReduceOp op,
                                      int64_t piece, int64_t begin,
                                      int64_t end, bool keep) {
  const DataType dtype = layout.dtype();
  const int64_t elem = layout.element_size();
  alignas(64) char acc[kBlockBytes];
  alignas(64) char own[kBlockBytes];
  const int64_t block = kBlockBytes / elem;
  for (int64_t at = begin; at < end; at += block) {
    const int64_t m = std::min(block, end - at);
    const int64_t offset = (at - piece) * elem;
    // This rank's contribution straight from its tensor where it can be.
    const void* mine = layout.InputView(at, m, own);
    auto contribution = [&](int r) -> const void* {
      return r == rank_ ? mine : slots_[r] + offset;
    };
    // In rank order: acc = c0 op c1, then acc op= c2, ... (size_ >= 2).
    Reduce(acc, contribution(0), contribution(1), m, dtype, op);
    for (int r = 2; r < size_; ++r) {
      Reduce(acc, acc, contribution(r), m, dtype, op);
    }
    std::memcpy(result_ + offset, acc, m * elem);
    if (!keep) layout.Scatter(at, m, acc);
  }
}

void MpiShmAllreduce::UnpackPeerChunks(const FusedLayout& layout,
                                       int64_t piece, int64_t piece_end,
                                       int64_t begin, int64_t end) {
  const int64_t elem = layout.element_size();
  layout.Scatter(piece, begin - piece, result_);
  layout.Scatter(end, piece_end - end, result_ + (end - piece) * elem);
}

}  // namespace hbcore
