// Executes a cycle's fusion batches on the backend that serves each one's
// device (BackendRegistry): a fused allreduce goes to the backend as a
// FusedLayout when it can reduce the tensors where they are, else through
// the pipeline's fusion buffers (AllreducePipeline); a lone allreduce runs
// straight from input to output. Scaling is applied on the way in and out
// (Average = Sum, then 1/size, unless the backend averages itself). Every
// copy, fill, scaling and scratch buffer goes through the backend's Memory,
// so nothing here assumes host memory. It allocates outputs whose size only
// the negotiation knew, and reports each tensor's result.
//
// On a rank that joined, or when a tensor failed negotiation elsewhere,
// `entries[i]` is null: the rank still takes part in the collective with a
// zero buffer of the negotiated shape, so the other ranks never hang.
#ifndef HBCORE_RUNTIME_EXECUTOR_H_
#define HBCORE_RUNTIME_EXECUTOR_H_

#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "backends/allreduce_pipeline.h"
#include "backends/backend.h"
#include "backends/backend_registry.h"
#include "backends/fused_layout.h"
#include "negotiation/message.h"
#include "negotiation/tensor_entry.h"
#include "runtime/timeline.h"

namespace hbcore {

// Result of one tensor, to be delivered to its done callback by the caller.
struct TensorResult {
  Status status;
  std::vector<int64_t> received_splits;
  // Join: the last rank that joined. Process-set operations (performed by
  // the runtime): the new set's id, or 1 / 0 for removed / not removed.
  int last_joined_rank = -1;
};

class Executor {
 public:
  // `backends` must outlive the executor.
  Executor(int rank, int size, const BackendRegistry* backends,
           Timeline* timeline);

  // One fusion batch: `entries` is parallel to `responses`.
  struct Batch {
    std::vector<const Response*> responses;
    std::vector<TensorEntry*> entries;
  };
  // Called once per batch with its results (one per tensor).
  using BatchDoneFn =
      std::function<void(size_t batch, std::vector<TensorResult>* results)>;

  // Runs a cycle's batches in order; the same order on every rank. Fused
  // allreduce batches that the backend does not reduce in place go through
  // the fusion buffers of the pipeline (AllreducePipeline); `done` is called
  // for every batch, in order, once its results are final.
  void Run(const std::vector<Batch>& batches, const BatchDoneFn& done);

  // An allreduce the fast path carried (controller.h, step G): `reduced` is
  // its Sum over every rank, copied to the output with Average's 1/size
  // and the postscale applied; the timeline gets a FAST_PATH_ALLREDUCE
  // event.
  TensorResult FinishCarried(const Response& r, TensorEntry* e,
                             const void* reduced);

 private:
  // Runs one batch to completion.
  void RunOne(const std::vector<const Response*>& responses,
              const std::vector<TensorEntry*>& entries,
              std::vector<TensorResult>* results);
  // Whether a batch goes through the pipeline (see Run).
  bool Pipelined(const Batch& batch) const;
  // The batch's tensors in fused coordinates, with their scale factors.
  std::unique_ptr<FusedLayout> Layout(
      const std::vector<const Response*>& responses,
      const std::vector<TensorEntry*>& entries) const;
  // Binds the batch's backend to this rank's device and orders it after
  // the inputs' ready events (Backend::BeginBatch).
  Status Begin(Backend* backend, const Response& head,
               const std::vector<TensorEntry*>& entries);
  double PostScale(const Response& r, const Backend* backend) const;
  Status Allreduce(const std::vector<const Response*>& responses,
                   const std::vector<TensorEntry*>& entries, Backend* backend);
  Status AllreduceAlone(const Response& r, TensorEntry* e, ReduceOp op,
                        Backend* backend,
                        const std::vector<const Response*>& responses);
  Status Allgather(const Response& r, TensorEntry* e, Backend* backend);
  Status Broadcast(const Response& r, TensorEntry* e, Backend* backend);
  Status Alltoall(const Response& r, TensorEntry* e, Backend* backend,
                  TensorResult* result);
  // A batch of alltoalls as one exchange (see fusion.h).
  Status AlltoallFused(const std::vector<const Response*>& responses,
                       const std::vector<TensorEntry*>& entries,
                       Backend* backend, std::vector<TensorResult>* results);
  Status Reducescatter(const Response& r, TensorEntry* e, Backend* backend);
  void Record(const std::vector<const Response*>& responses,
              const char* phase, Clock::time_point start);

  int rank_;
  int size_;
  const BackendRegistry* backends_;
  Timeline* timeline_;
  AllreducePipeline pipeline_;
  // Scratch buffers in the batch's backend's Memory, grown on demand: a
  // reducescatter's prescaled input, the zero-filled stand-in input of a
  // rank without an entry (joined), outputs nobody receives, and the packed
  // segments of a fused alltoall.
  ScratchBuffer prescaled_;
  ScratchBuffer zeros_;
  ScratchBuffer discard_;
  ScratchBuffer alltoall_send_;
  ScratchBuffer alltoall_recv_;
};

}  // namespace hbcore

#endif  // HBCORE_RUNTIME_EXECUTOR_H_
