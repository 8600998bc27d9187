// The CPU data plane over MPI. Standard types use MPI's built-in reduction
// operations; float16 and bfloat16 travel as 16-bit words with reduction
// operations created here (MPI has no standard half-precision type).
#ifndef HBCORE_BACKENDS_MPI_BACKEND_H_
#define HBCORE_BACKENDS_MPI_BACKEND_H_

#include <mpi.h>

#include <memory>

#include "backends/backend.h"
#include "backends/mpi/mpi_hier_allgather.h"
#include "backends/mpi/mpi_ring_allreduce.h"
#include "backends/mpi/mpi_shm_allreduce.h"

namespace hbcore {

class MpiBackend : public Backend {
 public:
  // `shm`, when given, reduces fused batches (AllreduceLayout). `cross`,
  // when not MPI_COMM_NULL, connects this rank with the ranks of the same
  // local rank on the other hosts: allreduces then go hierarchical (shm
  // within the host, `cross` between hosts), lone ones included.
  // `allgather`, when given, serves every allgather whose sizes it fits
  // (see mpi_hier_allgather.h); the same on every rank. `ring`, when
  // given, reduces the allreduces it takes (mpi_ring_allreduce.h) in place
  // of MPI_Allreduce: over `cross` between hosts when that is given, else
  // over `comm`.
  MpiBackend(MPI_Comm comm, std::unique_ptr<MpiShmAllreduce> shm,
             MPI_Comm cross,
             std::unique_ptr<MpiHierAllgather> allgather = nullptr,
             std::unique_ptr<MpiRingAllreduce> ring = nullptr);
  ~MpiBackend() override;
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;

  const char* name() const override { return "MPI"; }
  bool Serves(int device) const override { return device == HB_DEVICE_CPU; }
  Memory* memory() override { return &memory_; }

  // Not across hosts while autotune turned the hierarchical path off.
  bool AllreducesLayouts() const override {
    return shm_ != nullptr && (cross_ == MPI_COMM_NULL || UseCross());
  }
  Status AllreduceLayout(const FusedLayout& layout, ReduceOp op,
                         const PhaseFn& phase) override;
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                   ReduceOp op) override;
  // The ring's, where it takes the allreduce, else MPI_Iallreduce; where
  // MPI cannot (a count past its int range, an op it lacks) the allreduce
  // runs at once.
  Status StartAllreduce(const void* in, void* out, int64_t count,
                        DataType dtype, ReduceOp op,
                        std::unique_ptr<Pending>* pending) override;
  // The ring's pieces (MpiRingAllreduce::StartFromLayout).
  bool StartsFromLayout(int64_t count, DataType dtype,
                        ReduceOp op) const override;
  Status StartAllreduceFromLayout(const FusedLayout& layout, int64_t begin,
                                  int64_t count, void* buffer, ReduceOp op,
                                  std::unique_ptr<Pending>* pending) override;
  Status Allgatherv(const void* in, void* out,
                    const std::vector<int64_t>& bytes_per_rank) override;
  Status Broadcast(void* buffer, int64_t bytes, int root) override;
  Status Alltoallv(const void* in, const std::vector<int64_t>& send_bytes,
                   void* out, const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* in, void* out,
                       const std::vector<int64_t>& counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override;

 private:
  MPI_Datatype MpiType(DataType dtype) const;
  // Returns MPI_OP_NULL for combinations MPI cannot reduce.
  MPI_Op MpiOp(DataType dtype, ReduceOp op) const;

  // Whether the built paths are in use under the backend's tuning
  // (Backend::Tune): the hierarchical allreduce; the ring for a reduction
  // over `cross_` (`across`) or over `comm_`: it was built over one of
  // them, and serves only that one.
  bool UseCross() const {
    return cross_ != MPI_COMM_NULL && tuning_.hierarchical_allreduce;
  }
  bool UseRing(int64_t count, DataType dtype, ReduceOp op,
               bool across) const {
    return ring_ && tuning_.ring_allreduce && across == ring_across_ &&
           ring_->Takes(count, dtype, op);
  }

  // The hierarchical allreduce of a layout (shm_ and cross_ both set).
  Status AllreduceAcrossHosts(const FusedLayout& layout, ReduceOp op,
                              const PhaseFn& phase);

  HostMemory memory_;
  MPI_Comm comm_;
  std::unique_ptr<MpiShmAllreduce> shm_;
  MPI_Comm cross_;
  std::unique_ptr<MpiHierAllgather> hier_allgather_;
  std::unique_ptr<MpiRingAllreduce> ring_;
  bool ring_across_ = false;  // ring_ was built over cross_
  int rank_ = 0;
  int size_ = 1;
  // [0]: float16, [1]: bfloat16; by Sum, Min, Max, Product.
  MPI_Op half_ops_[2][4];
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_MPI_BACKEND_H_
