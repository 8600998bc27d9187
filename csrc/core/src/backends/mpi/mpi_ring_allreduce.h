// The allreduce between hosts as a ring over MPI point-to-point messages,
// reduced with hbcore's own kernels (reduce_kernels.h).
//
// Why: MPICH's MPI_Allreduce took longer than a plain reduce-scatter +
// allgather over MPI_Sendrecv on the same bytes between two emulated
// hosts (MPICH 5.0.2, 2 x 1 ranks, float32 sum, in place). Early on
// 2026-11-27: 64 KiB 27 against 19 us, 512 KiB 146 against 76 us, 4 MiB
// 1046-1079 against 460-463 us, 20 MiB 2.5-2.7 against 1.9-2.1 ms; an
// hour later, the VM faster: 512 KiB 67 against 57 us, 4 MiB 371 against
// 268 us, 16 MiB 2.1 against 1.8 ms, and 64 MiB 23.7 against 9.3 ms.
//
// Algorithm (P ranks of the communicator, rank r; the buffer split into P
// chunks of count*i/P .. count*(i+1)/P elements): P-1 reduce-scatter
// steps, in step s sending chunk (r-s) mod P to rank r+1 and receiving
// chunk (r-s-1) mod P from rank r-1 into scratch, reduced into the
// buffer; then P-1 allgather steps, in step s sending chunk (r+1-s) mod P
// and receiving chunk (r-s) mod P straight into the buffer. Each rank
// sends and receives 2(P-1)/P of the buffer, the bandwidth optimum.
//
// Matching: every allreduce gets the next tag of a counter that every
// rank advances in the same order (all ranks start the same allreduces in
// the same order: backend.h), so two allreduces in flight at once never
// take each other's messages; within one allreduce, MPI's non-overtaking
// order between a pair of ranks matches step to step. The messages travel
// on a communicator of their own (a duplicate), apart from every other
// message of the job.
#ifndef HBCORE_BACKENDS_MPI_RING_ALLREDUCE_H_
#define HBCORE_BACKENDS_MPI_RING_ALLREDUCE_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/fused_layout.h"

namespace hbcore {

class MpiRingAllreduce {
 public:
  // Allreduces smaller than this stay with MPI_Allreduce: below it the
  // ring's 2(P-1) steps cost more than they save (16 KiB: 14 us either way).
  static constexpr int64_t kMinBytes = 64 * 1024;

  // Duplicates `comm` (a collective call on it).
  explicit MpiRingAllreduce(MPI_Comm comm);
  ~MpiRingAllreduce();
  MpiRingAllreduce(const MpiRingAllreduce&) = delete;
  MpiRingAllreduce& operator=(const MpiRingAllreduce&) = delete;

  // Whether the ring reduces `count` elements of `dtype` with `op`: the
  // same answer on every rank for the same arguments.
  bool Takes(int64_t count, DataType dtype, ReduceOp op) const;

  // Starts the in-place allreduce of `data`; it completes in
  // (*pending)->Wait() (the buffer untouched by the caller until then).
  void Start(void* data, int64_t count, DataType dtype, ReduceOp op,
             std::unique_ptr<Backend::Pending>* pending);

  // The same, waited for.
  Status Allreduce(void* data, int64_t count, DataType dtype, ReduceOp op);

  // Starts the allreduce of fused elements [begin, begin + count) of
  // `layout` (its dtype; prescales and postscales applied) into the
  // tensors' outputs, with `buffer` (count elements, not overlapping the
  // tensors) as its working memory. The ring packs only the chunk it sends
  // first; every other chunk's own contribution is read from the tensors
  // by the reduction that needs it (FusedLayout::ReduceInto), which spares
  // writing (P-1)/P of the piece into the buffer and reading it back. The
  // chunk a rank reduces last is final there and goes to the outputs at
  // once, span by span while in cache; each chunk received in the
  // allgather goes to them as its step completes. Takes() must hold for
  // `count`.
  void StartFromLayout(const FusedLayout& layout, int64_t begin,
                       int64_t count, void* buffer, ReduceOp op,
                       std::unique_ptr<Backend::Pending>* pending);

 private:
  // The tag of the next allreduce started (see "Matching" above).
  int NextTag();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int next_tag_ = 0;
  // Reduce-scatter scratch of finished allreduces, for the next ones.
  std::shared_ptr<std::vector<std::vector<char>>> spare_scratch_;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_MPI_RING_ALLREDUCE_H_
