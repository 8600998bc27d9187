// Pipelined fused allreduces on a backend that does not reduce them in place
// (Backend::AllreducesLayouts is false): the flat MPI path of jobs spanning
// hosts without the hierarchical path, or with shared memory disabled. The
// overlap needs Backend::StartAllreduce not to block (MPI_Iallreduce).
//
// A fused batch (a FusedLayout) travels through kBuffers fusion buffers, in
// the backend's Memory, in pieces of at most Backend::PieceBytes(): piece k is
// packed, its allreduce started, and while it is in flight piece k+1 is
// packed into the next buffer (the packing calls Test on the oldest
// operation between blocks, so MPI progresses it meanwhile). A buffer is
// reused only after the piece in it has completed and been unpacked. Where
// the backend starts pieces from the layout (Backend::StartsFromLayout:
// hbcore's ring), it packs only what it sends first and reads the rest of
// this rank's contribution from the tensors as it reduces, and it writes
// the result to the tensors' outputs as parts of it become final, so the
// pipeline does not unpack that piece.
//
// Contract (cross-rank): every rank starts the same batches in the same
// order, split into the same pieces (the split depends only on the
// negotiated layout), so the non-blocking allreduces match up. Operations
// complete in start order, and `done` runs for each batch, in start order,
// when its last piece is unpacked. A caller that runs another collective
// in between may do so (every rank does the same), but must Drain first
// if that collective uses the same buffers' tensors.
#ifndef HBCORE_BACKENDS_ALLREDUCE_PIPELINE_H_
#define HBCORE_BACKENDS_ALLREDUCE_PIPELINE_H_

#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/fused_layout.h"
#include "common/status.h"

namespace hbcore {

class AllreducePipeline {
 public:
  using DoneFn = std::function<void(size_t batch, const Status& status)>;
  // `phase(batch, name, start)` reports a timeline phase of a batch.
  using BatchPhaseFn = std::function<void(size_t batch, const char* phase,
                                          std::chrono::steady_clock::time_point start)>;

  static constexpr int kBuffers = 2;

  AllreducePipeline() = default;
  ~AllreducePipeline() { Drain(); }
  AllreducePipeline(const AllreducePipeline&) = delete;
  AllreducePipeline& operator=(const AllreducePipeline&) = delete;

  // Where completions are reported, until the next call; only while
  // nothing is in flight.
  void SetCallbacks(DoneFn done, BatchPhaseFn phase) {
    done_ = std::move(done);
    phase_ = std::move(phase);
  }
  // Starts batch `batch` (`op` is never Average; the layout's scale factors
  // are applied). Completes older operations as buffers or the in-flight
  // limit require. The layout must stay alive until its batch is done.
  void Start(size_t batch, const FusedLayout* layout, ReduceOp op,
             Backend* backend);
  // Completes every operation started.
  void Drain();

 private:
  struct Flight {
    size_t batch = 0;
    const FusedLayout* layout = nullptr;
    Backend* backend = nullptr;
    std::unique_ptr<Backend::Pending> op;  // null: failed to start
    Status status;
    int buffer = -1;          // fused piece: the buffer holding it
    int64_t begin = 0;        // fused piece: [begin, end) of the layout
    int64_t end = 0;
    bool unpacked = false;    // the backend writes the outputs itself
    bool last = true;         // the batch's last piece
    std::chrono::steady_clock::time_point start;
  };

  // Gathers [begin, end) of `layout` into `dst`, letting the oldest
  // operation progress between blocks.
  Status Pack(const FusedLayout& layout, int64_t begin, int64_t end,
              char* dst, Memory* memory);
  void CompleteOldest();

  DoneFn done_;
  BatchPhaseFn phase_;
  std::deque<Flight> flights_;
  Status batch_status_;  // first error among the finished pieces of a batch
  std::chrono::steady_clock::time_point batch_start_;  // its first piece's
  ScratchBuffer buffers_[kBuffers];
  char* buffer_data_[kBuffers] = {nullptr, nullptr};
  int next_buffer_ = 0;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_ALLREDUCE_PIPELINE_H_
