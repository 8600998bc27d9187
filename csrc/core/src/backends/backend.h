// Data plane: a backend runs one collective on buffers that every rank
// passes in the same call order (the executor guarantees that order).
//
// Device is a dimension of the data plane. Each process set's executor has
// a BackendRegistry (backend_registry.h) filled at init: the MPI backend
// serves CPU buffers and is always there; the NCCL backend (nccl_backend.h,
// with NCCL loaded at run time) serves GPU buffers. A backend owns the
// Memory its buffers live in (memory.h): allocation, copies and scaling,
// so the executor makes no host-only calls.
//
// Per batch the executor calls BeginBatch (the backend binds its device and
// orders itself after the inputs' producers), then collectives and Memory
// operations, then memory()->Synchronize() before reporting results.
#ifndef HBCORE_BACKENDS_BACKEND_H_
#define HBCORE_BACKENDS_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/fused_layout.h"
#include "backends/memory.h"
#include "common/status.h"
#include "common/types.h"

namespace hbcore {

// Called with a phase name (a timeline event) and when that phase started,
// as the phase ends.
using PhaseFn = std::function<void(const char* phase,
                                   std::chrono::steady_clock::time_point start)>;

// The data-plane choices autotune may change between cycles (autotune.h),
// the same on every rank. A switch turns a path off or back on where the
// backend was built with it; it never builds one.
struct BackendTuning {
  bool hierarchical_allreduce = true;
  bool hierarchical_allgather = true;
  bool ring_allreduce = true;
  int64_t piece_bytes = 0;  // 0: the backend's own PieceBytes
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Background thread, between cycles (no collective in flight).
  void Tune(const BackendTuning& tuning) { tuning_ = tuning; }

  virtual const char* name() const = 0;
  virtual bool Serves(int device) const = 0;
  // Where this backend's buffers live; valid for the backend's lifetime.
  virtual Memory* memory() = 0;

  // Before each batch: `device` is this rank's device for it, `ready` the
  // events (cudaEvent_t) its inputs' producers recorded; everything the
  // batch does is ordered after them. Host backends have nothing to do.
  virtual Status BeginBatch(int /*device*/,
                            const std::vector<void*>& /*ready*/) {
    return Status::OK();
  }
  // True when Allreduce / StartAllreduce / Reducescatter take
  // ReduceOp::kAverage themselves (NCCL's average); else the executor turns
  // Average into Sum and a 1/size postscale.
  virtual bool ReducesAverage() const { return false; }
  // The largest piece of a fused batch that the pipeline hands to one
  // StartAllreduce (AllreducePipeline).
  virtual int64_t PieceBytes() const {
    return tuning_.piece_bytes > 0 ? tuning_.piece_bytes : int64_t{4} << 20;
  }

  // True when this backend reduces fused batches of any size where their
  // tensors are (AllreduceLayout), so that the executor needs no fusion
  // buffer. The same answer on every rank.
  virtual bool AllreducesLayouts() const { return false; }
  // Reduces every tensor of the batch into its output, with its scale
  // factors applied; reports the copy and reduction phases to `phase`.
  virtual Status AllreduceLayout(const FusedLayout& /*layout*/,
                                 ReduceOp /*op*/, const PhaseFn& /*phase*/) {
    return Status::Unsupported("this backend has no layout allreduce");
  }

  // `out` may equal `in` (in place). `op` is Average only when
  // ReducesAverage().
  virtual Status Allreduce(const void* in, void* out, int64_t count,
                           DataType dtype, ReduceOp op) = 0;

  // An allreduce started by StartAllreduce. Its buffers stay untouched by
  // the caller until Wait returns.
  class Pending {
   public:
    virtual ~Pending() = default;
    // Lets the operation progress; true once it has completed (then Wait
    // returns at once).
    virtual bool Test() = 0;
    virtual Status Wait() = 0;
  };
  // Starts an allreduce that completes in (*pending)->Wait(). Every rank
  // starts the same allreduces in the same order, interleaved with the
  // same other collectives. The default runs it at once.
  virtual Status StartAllreduce(const void* in, void* out, int64_t count,
                                DataType dtype, ReduceOp op,
                                std::unique_ptr<Pending>* pending);
  // Whether StartAllreduceFromLayout takes pieces of `count` elements of
  // `dtype` with `op`: the same answer on every rank for the same arguments.
  virtual bool StartsFromLayout(int64_t /*count*/, DataType /*dtype*/,
                                ReduceOp /*op*/) const {
    return false;
  }
  // StartAllreduce of fused elements [begin, begin + count) of `layout`
  // straight into the tensors' outputs (scale factors applied), with
  // `buffer`, a fusion buffer of count elements, as working memory: the
  // backend packs and unpacks what it needs itself, reading and writing
  // the tensors where they are (MpiRingAllreduce::StartFromLayout). The
  // outputs are final once Wait returned. Only where StartsFromLayout.
  virtual Status StartAllreduceFromLayout(
      const FusedLayout& /*layout*/, int64_t /*begin*/, int64_t /*count*/,
      void* /*buffer*/, ReduceOp /*op*/, std::unique_ptr<Pending>* /*pending*/) {
    return Status::Unsupported("this backend packs fused pieces first");
  }
  // Rank r contributes bytes_per_rank[r] bytes; out holds them in rank order.
  virtual Status Allgatherv(const void* in, void* out,
                            const std::vector<int64_t>& bytes_per_rank) = 0;
  virtual Status Broadcast(void* buffer, int64_t bytes, int root) = 0;
  // send_bytes[r] go to rank r (packed in rank order in `in`); recv_bytes[r]
  // come from rank r (packed in rank order in `out`).
  virtual Status Alltoallv(const void* in,
                           const std::vector<int64_t>& send_bytes, void* out,
                           const std::vector<int64_t>& recv_bytes) = 0;
  // Reduces `in` (sum of counts elements) and leaves block r on rank r.
  virtual Status Reducescatter(const void* in, void* out,
                               const std::vector<int64_t>& counts,
                               DataType dtype, ReduceOp op) = 0;
  virtual Status Barrier() = 0;

 protected:
  BackendTuning tuning_;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_BACKEND_H_
