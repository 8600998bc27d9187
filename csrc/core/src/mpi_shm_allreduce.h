// Allreduce through memory shared by the ranks of one node.
//
// MPI's allreduce moves the data between processes through its own shared
// memory cells or kernel-assisted copies, then reduces. For the fused
// small-tensor batch of a training step that costs as much again as the two
// fusion copies around it. When every rank of the job is on one node, the
// executor instead fuses straight into this rank's slot of one segment that
// every rank maps, and the reduction reads the peers' slots directly:
//
//   1. each rank has copied its inputs into its own slot (the fusion copy)
//      -- barrier --
//   2. rank r reduces chunk r (about 1/n of the elements) over the n slots
//      and writes the result into chunk r of every slot
//      -- barrier --
//   3. every slot holds the whole result; the executor copies out of its own
//
// Invariant: after the second barrier no rank touches another rank's slot
// until the first barrier of the next batch, so a rank may start its next
// copy-in at once. Each chunk is reduced by one rank, in rank order, and
// copied to all, so every rank gets bit-identical results, and the same
// results however the batch was fused.
//
// The segment is a POSIX shared-memory object, fully allocated up front
// (posix_fallocate: a full /dev/shm is an error at init, never a SIGBUS
// later) and unlinked as soon as every rank mapped it, so a job that dies
// leaves nothing behind.
#ifndef HBCORE_MPI_SHM_ALLREDUCE_H_
#define HBCORE_MPI_SHM_ALLREDUCE_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "status.h"
#include "types.h"

namespace hbcore {

class MpiShmAllreduce {
 public:
  // Collective over `node`, a communicator of ranks on one host. On
  // failure (no /dev/shm, not enough space) every rank gets the same
  // non-OK status and the caller goes on without the shared path.
  static Status Create(MPI_Comm node, int64_t slot_bytes,
                       std::unique_ptr<MpiShmAllreduce>* out);
  ~MpiShmAllreduce();
  MpiShmAllreduce(const MpiShmAllreduce&) = delete;
  MpiShmAllreduce& operator=(const MpiShmAllreduce&) = delete;

  // This rank's slot when `bytes` fit in it, else nullptr.
  char* Staging(int64_t bytes) { return bytes <= slot_bytes_ ? slots_[rank_] : nullptr; }
  bool IsStaging(const void* p) const { return p == slots_[rank_]; }

  // Reduces the first `count` elements of every slot (each rank's input,
  // in place in its own slot); on return this rank's slot holds the result.
  Status Allreduce(int64_t count, DataType dtype, ReduceOp op);

 private:
  MpiShmAllreduce() = default;
  Status Barrier();

  MPI_Comm comm_ = MPI_COMM_NULL;  // private duplicate of the node comm
  int rank_ = 0;
  int size_ = 1;
  int64_t slot_bytes_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::vector<char*> slots_;
};

}  // namespace hbcore

#endif  // HBCORE_MPI_SHM_ALLREDUCE_H_
