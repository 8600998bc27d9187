// Allreduce through memory shared by the ranks of one node.
//
// MPI's allreduce moves the data between processes through its own shared
// memory cells, then reduces: with the fusion copies around it, a fused
// batch crosses memory four or five times. When every rank of the job is on
// one node, hbcore instead reduces through one segment that every rank
// maps: n input slots (one per rank) and one result area, indexed in the
// batch's fused coordinates (see FusedLayout). A batch is reduced piece by
// piece, a piece being at most a slot of elements (most batches are one
// piece). Chunk k of a piece (about 1/n of its elements) belongs to rank k:
//
//   1. each rank packs its inputs for every chunk but its own into its
//      slot (its own chunk it reads straight from its tensors in step 2)
//      -- barrier --
//   2. rank r combines chunk r block by block, in rank order (slot 0, then
//      slot 1, ...; its own contribution from its tensors), writes the
//      result into chunk r of the result area and unpacks it into its own
//      outputs
//      -- barrier --
//   3. each rank unpacks the other chunks from the result area
//
// Each element crosses memory about twice per rank instead of four or five
// times, and every rank gets bit-identical results, the same however the
// batch was fused (each element is combined in rank order, by one rank).
//
// Invariant: a rank writes only its own slot (step 1) and its own chunk of
// the result area (step 2); peers read a slot only between the two
// barriers, and the result area only after the second. The next piece's
// (or batch's) step 1 follows this piece's second barrier, which no rank
// passes before every rank finished reading slots; its step 2 follows its
// own first barrier, which no rank passes before every rank finished step 3
// here. So no write of the next piece overtakes a read of this one,
// whatever the chunk boundaries of either.
//
// Hierarchical mode (jobs spanning hosts with the same number of ranks on
// each): in step 2, rank r first combines its whole chunk into the result
// area, then `across` allreduces that chunk in place with the ranks of
// local rank r on the other hosts (whose chunks cover the same fused
// elements, since every host has the same layout and size), and only then
// unpacks it. The cross-host traffic is spread over all local ranks, each
// carrying 1/n of the batch.
//
// The segment is a POSIX shared-memory object, fully allocated up front
// (posix_fallocate: a full /dev/shm is an error at init, never a SIGBUS
// later) and unlinked as soon as every rank mapped it, so a job that dies
// leaves nothing behind.
#ifndef HBCORE_BACKENDS_MPI_SHM_ALLREDUCE_H_
#define HBCORE_BACKENDS_MPI_SHM_ALLREDUCE_H_

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "backends/fused_layout.h"
#include "common/status.h"
#include "common/types.h"

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

  // Reduces `count` elements at `data` in place with the other hosts.
  using ChunkFn = std::function<Status(void* data, int64_t count)>;

  // Reduces the batch (a layout of the same total() elements on every
  // rank) and writes the result into every tensor's output. For the
  // timeline, `phase` is called as each of the three steps ends when the
  // batch is one piece, else once for the whole (the steps interleave).
  // `across`, when given, makes it hierarchical (see the class comment).
  Status Allreduce(const FusedLayout& layout, ReduceOp op,
                   const PhaseFn& phase, const ChunkFn* across = nullptr);

 private:
  MpiShmAllreduce() = default;
  Status Barrier();
  // Steps 1, 2 and 3 of the class comment for the piece of fused elements
  // [piece, piece_end) and this rank's chunk [begin, end) of it. Slot and
  // result offsets are relative to the piece.
  void PackPeerChunks(const FusedLayout& layout, int64_t piece,
                      int64_t piece_end, int64_t begin, int64_t end);
  // Combines this rank's chunk into the result area; unpacks it into its
  // outputs as it goes unless `keep` (hierarchical: unpacked later).
  void CombineOwnChunk(const FusedLayout& layout, ReduceOp op, int64_t piece,
                       int64_t begin, int64_t end, bool keep);
  void UnpackPeerChunks(const FusedLayout& layout, int64_t piece,
                        int64_t piece_end, int64_t begin, int64_t end);

  MPI_Comm comm_ = MPI_COMM_NULL;  // private duplicate of the node comm
  int rank_ = 0;
  int size_ = 1;
  int64_t slot_bytes_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::vector<char*> slots_;
  char* result_ = nullptr;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_MPI_SHM_ALLREDUCE_H_
