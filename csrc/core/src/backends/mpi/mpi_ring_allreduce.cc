#include "backends/mpi/mpi_ring_allreduce.h"

#include <climits>
#include <string>
#include <utility>

#include "backends/reduce_kernels.h"
#include "common/mpi_wait.h"

namespace hbcore {
namespace {

// Tags cycle through [0, kTagSpace): MPI guarantees at least 32767.
constexpr int kTagSpace = 32767;
// Scratch buffers kept for reuse (two allreduces in flight, and one more).
constexpr size_t kSpareScratch = 3;

using ScratchPool = std::vector<std::vector<char>>;

int Mod(int64_t x, int n) {
  return static_cast<int>(((x % n) + n) % n);
}

// One ring allreduce in flight: the messages of its current step are
// posted; Test and Wait finish steps (reducing what a reduce-scatter step
// received) and post the next ones.
class RingPending : public Backend::Pending {
 public:
  // `layout`: null, or the batch whose fused elements [layout_begin,
  // layout_begin + count) are reduced into `data` (StartFromLayout).
  RingPending(MPI_Comm comm, int rank, int size, int tag, char* data,
              int64_t count, DataType dtype, ReduceOp op,
              std::shared_ptr<ScratchPool> pool,
              const FusedLayout* layout = nullptr, int64_t layout_begin = 0)
      : comm_(comm), rank_(rank), size_(size), tag_(tag), data_(data),
        count_(count), elem_(DataTypeSize(dtype)), dtype_(dtype), op_(op),
        pool_(std::move(pool)), layout_(layout), layout_begin_(layout_begin) {
    if (!pool_->empty()) {
      scratch_ = std::move(pool_->back());
      pool_->pop_back();
    }
    // The largest chunk, the most one reduce-scatter step receives.
    scratch_.resize(static_cast<size_t>((count_ + size_ - 1) / size_ * elem_));
    if (layout_ != nullptr) {
      // The first step sends this rank's own chunk, so it is the one chunk
      // of its contribution that goes through the buffer.
      layout_->Gather(layout_begin_ + ChunkBegin(rank_), ChunkCount(rank_),
                      Chunk(rank_));
    }
    Post();
  }

  ~RingPending() override {
    Wait();
    if (pool_->size() < kSpareScratch) pool_->push_back(std::move(scratch_));
  }

  bool Test() override {
    while (!done_) {
      int flag = 0;
      int rc = MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return Fail(rc, "MPI_Testall");
      if (!flag) return false;
      FinishStep();
    }
    return true;
  }

  Status Wait() override {
    while (!done_) {
      int rc = MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        Fail(rc, "MPI_Waitall");
        break;
      }
      FinishStep();
    }
    return status_;
  }

 private:
  int steps() const { return 2 * (size_ - 1); }
  bool reduce_scatter() const { return step_ < size_ - 1; }
  // First element of chunk i (i = size_ is the end).
  int64_t ChunkBegin(int i) const { return count_ * i / size_; }
  int64_t ChunkCount(int i) const { return ChunkBegin(i + 1) - ChunkBegin(i); }
  char* Chunk(int i) const { return data_ + ChunkBegin(i) * elem_; }
  int SendChunk() const {
    return reduce_scatter() ? Mod(rank_ - step_, size_)
                            : Mod(rank_ + 1 - (step_ - (size_ - 1)), size_);
  }
  int RecvChunk() const {
    return reduce_scatter() ? Mod(rank_ - step_ - 1, size_)
                            : Mod(rank_ - (step_ - (size_ - 1)), size_);
  }

  void Post() {
    if (step_ >= steps()) {
      done_ = true;
      return;
    }
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    const int recv = RecvChunk();
    const int send = SendChunk();
    char* into = reduce_scatter() ? scratch_.data() : Chunk(recv);
    // Takes() keeps every chunk within int bytes.
    int rc = MPI_Irecv(into, static_cast<int>(ChunkCount(recv) * elem_),
                       MPI_BYTE, left, tag_, comm_, &requests_[0]);
    if (rc != MPI_SUCCESS) {
      Fail(rc, "MPI_Irecv");
      return;
    }
    rc = MPI_Isend(Chunk(send), static_cast<int>(ChunkCount(send) * elem_),
                   MPI_BYTE, right, tag_, comm_, &requests_[1]);
    if (rc != MPI_SUCCESS) Fail(rc, "MPI_Isend");
  }

  void FinishStep() {
    const int recv = RecvChunk();
    char* chunk = Chunk(recv);
    if (reduce_scatter()) {
      // Each chunk but the rank's own is reduced once in the reduce-scatter:
      // there its own contribution meets the one received. The last step's
      // is final (the one this rank passes around in the allgather).
      if (layout_ != nullptr) {
        layout_->ReduceInto(layout_begin_ + ChunkBegin(recv), ChunkCount(recv),
                            chunk, scratch_.data(), op_,
                            /*scatter=*/step_ == size_ - 2);
      } else {
        Reduce(chunk, chunk, scratch_.data(), ChunkCount(recv), dtype_, op_);
      }
    } else if (layout_ != nullptr) {
      layout_->Scatter(layout_begin_ + ChunkBegin(recv), ChunkCount(recv),
                       chunk);
    }
    ++step_;
    Post();
  }

  bool Fail(int rc, const char* call) {
    status_ = MpiStatus(rc, (std::string(call) + " (ring allreduce)").c_str());
    // Nothing more is posted; what is in flight is waited for, so that no
    // request outlives its buffers.
    MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
    done_ = true;
    return true;
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  int tag_;
  char* data_;
  int64_t count_;
  int64_t elem_;
  DataType dtype_;
  ReduceOp op_;
  std::shared_ptr<ScratchPool> pool_;
  const FusedLayout* layout_;
  int64_t layout_begin_;
  std::vector<char> scratch_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int step_ = 0;
  bool done_ = false;
  Status status_;
};

}  // namespace

MpiRingAllreduce::MpiRingAllreduce(MPI_Comm comm)
    : spare_scratch_(std::make_shared<ScratchPool>()) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiRingAllreduce::~MpiRingAllreduce() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

bool MpiRingAllreduce::Takes(int64_t count, DataType dtype,
                             ReduceOp op) const {
  const int64_t elem = DataTypeSize(dtype);
  const int64_t largest_chunk = (count + size_ - 1) / size_ * elem;
  return size_ > 1 && count * elem >= kMinBytes && largest_chunk <= INT_MAX &&
         ReduceSupported(dtype, op);
}

int MpiRingAllreduce::NextTag() {
  const int tag = next_tag_;
  next_tag_ = (next_tag_ + 1) % kTagSpace;
  return tag;
}

void MpiRingAllreduce::Start(void* data, int64_t count, DataType dtype,
                             ReduceOp op,
                             std::unique_ptr<Backend::Pending>* pending) {
  *pending = std::make_unique<RingPending>(comm_, rank_, size_, NextTag(),
                                           static_cast<char*>(data), count,
                                           dtype, op, spare_scratch_);
}

void MpiRingAllreduce::StartFromLayout(
    const FusedLayout& layout, int64_t begin, int64_t count, void* buffer,
    ReduceOp op, std::unique_ptr<Backend::Pending>* pending) {
  *pending = std::make_unique<RingPending>(
      comm_, rank_, size_, NextTag(), static_cast<char*>(buffer), count,
      layout.dtype(), op, spare_scratch_, &layout, begin);
}

Status MpiRingAllreduce::Allreduce(void* data, int64_t count, DataType dtype,
                                   ReduceOp op) {
  std::unique_ptr<Backend::Pending> pending;
  Start(data, count, dtype, op, &pending);
  return pending->Wait();
}

}  // namespace hbcore
