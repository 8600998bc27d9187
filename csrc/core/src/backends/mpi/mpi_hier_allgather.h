// Allgather for jobs spanning hosts: within each host first, then between
// one leader per host, then within each host again.
//
// A flat MPI_Allgatherv over p ranks is not topology aware: its ring (or
// recursive doubling) makes p - 1 steps, many of them between hosts, and a
// block crosses the network once per host boundary on its way round. Here
// every block crosses the network once per other host, in hosts - 1 steps
// between leaders, and the rest moves within hosts (MPI's shared-memory
// path there). A call, on every rank of the job, in the same order:
//
//   1. MPI_Gatherv within the host to its leader (local rank 0, the host's
//      lowest global rank): the host's blocks, in ascending global rank,
//      land at the host's offset of the host-major buffer;
//   2. the leaders MPI_Allgatherv the host blocks in place, in leader order
//      (ascending global rank of the leaders), completing the host-major
//      buffer on every leader;
//   3. each leader moves every rank's block to its offset in global rank
//      order (nothing to do when the placement is contiguous; see below)
//      and MPI_Bcasts the result within its host.
//
// Invariant: the output is byte for byte what MPI_Allgatherv over the whole
// job gives, for any placement of ranks on hosts, uneven host sizes and
// empty blocks included: block r has bytes_per_rank[r] bytes at offset
// sum(bytes_per_rank[0..r)). When every host's ranks are consecutive in
// global rank order and the hosts come in leader order ("contiguous", the
// usual block placement), host-major order is global order: steps 1 and 2
// then write straight into the output and step 3 only broadcasts.
// Otherwise the host-major buffer is a scratch area owned by this object.
//
// Only the leaders communicate between hosts, and non-leaders wait in step
// 3's broadcast meanwhile. Steps use private duplicates of the host and
// leader communicators, so nothing else's messages can match theirs.
#ifndef HBCORE_BACKENDS_MPI_HIER_ALLGATHER_H_
#define HBCORE_BACKENDS_MPI_HIER_ALLGATHER_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace hbcore {

class MpiHierAllgather {
 public:
  // Collective over `comm` (the job's communicator); `local` is this
  // rank's host communicator, split from `comm` with keys in global rank
  // order. Both are only read here: the object keeps its own duplicates.
  // Calls whose whole output is smaller than `min_bytes` stay flat (see
  // Takes).
  static Status Create(MPI_Comm comm, MPI_Comm local, int64_t min_bytes,
                       std::unique_ptr<MpiHierAllgather>* out);
  ~MpiHierAllgather();
  MpiHierAllgather(const MpiHierAllgather&) = delete;
  MpiHierAllgather& operator=(const MpiHierAllgather&) = delete;

  // Whether Allgatherv takes a call of these sizes (the same answer on
  // every rank: the sizes are): every count and offset of the three steps
  // fits MPI's int (the whole output does), and the output is at least
  // min_bytes. Three collectives cost more than one flat one for small
  // outputs (one noisy run on emulated hosts: about 0.65x the flat path
  // at 4 KiB per rank, several times faster at 4 MiB), so the automatic
  // choice keeps small ones flat.
  bool Takes(const std::vector<int64_t>& bytes_per_rank) const;

  // Rank r contributes bytes_per_rank[r] bytes (the same vector on every
  // rank); `out` receives them in global rank order. `in` may be null
  // when this rank contributes nothing.
  Status Allgatherv(const void* in, void* out,
                    const std::vector<int64_t>& bytes_per_rank);

 private:
  MpiHierAllgather() = default;

  MPI_Comm local_ = MPI_COMM_NULL;    // this host's ranks; leader is 0
  MPI_Comm leaders_ = MPI_COMM_NULL;  // local rank 0 of every host, else null
  int64_t min_bytes_ = 0;
  int rank_ = 0;
  int local_size_ = 1;
  int host_ = 0;  // index of this rank's host in leader order
  // host_ranks_[h]: the global ranks of host h, ascending (its local ranks
  // in order); hosts in ascending global rank of their leaders.
  std::vector<std::vector<int>> host_ranks_;
  // Global rank order equals host-major order (see the file comment).
  bool contiguous_ = true;
  // The host-major buffer of non-contiguous placements (leaders only).
  std::vector<char> scratch_;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_MPI_HIER_ALLGATHER_H_
