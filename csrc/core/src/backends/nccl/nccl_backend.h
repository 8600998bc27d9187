// The GPU data plane: collectives on device buffers through NCCL, with NCCL
// and the CUDA runtime loaded at run time (GpuLibraries). It serves every
// GPU device ordinal of one process set; one process drives one GPU (the
// first device it is given binds it).
//
// Streams. Two streams of the runtime's own, on the bound device:
//  - the copy stream runs every Memory operation (packing into and out of
//    fusion buffers, prescaling, zero fills) and first waits for each
//    batch's input ready events (BeginBatch);
//  - the NCCL stream runs the collectives; before each one it waits for
//    the copy stream's work queued so far (an event), so a collective sees
//    its packed or scaled inputs. The pipeline's next piece is packed on
//    the copy stream while the current one is reduced on the NCCL stream.
// A blocking collective returns once its work completed; StartAllreduce
// returns a Pending that completes on an event. Synchronize() waits for
// both streams, so outputs are final when the executor reports results.
//
// Scaling uses no CUDA kernels of hbcore's: Average is NCCL's ncclAvg
// (ReducesAverage), and pre/postscale factors run as a pre-multiplied sum
// (ncclRedOpCreatePreMulSum) on a one-rank communicator of this process,
// which multiplies a buffer by a scalar into another.
//
// Set-up (lazy, at the first GPU batch, which every member reaches in the
// same order): bind the device, create the streams, agree over the host
// backend that every member managed to (a MIN allreduce), check that no two
// members share a GPU (an allgather of host and PCI bus id: NCCL refuses
// that, with a reason only its debug log names, so hbcore refuses first
// with UnsupportedError naming the ranks and the GPU), broadcast rank 0's
// ncclUniqueId over the host backend (MPI stays the control plane) and
// ncclCommInitRank.
//
// Failures. Every wait polls the CUDA event, NCCL's asynchronous error, the
// peers' failure notices (PeerAlarm) and the runtime's shutdown flag. A
// failure aborts the communicator (ncclCommAbort), raises a notice to the
// other members (unless it came from one) and fails this and every later
// GPU collective of the set with the reason, so an error on one rank
// becomes an error on every rank, never a hang.
#ifndef HBCORE_BACKENDS_NCCL_BACKEND_H_
#define HBCORE_BACKENDS_NCCL_BACKEND_H_

#include <functional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/peer_alarm.h"
#include "gpu/gpu_libraries.h"

namespace hbcore {

struct NcclBackendOptions {
  const GpuLibraries* gpu = nullptr;
  // A host backend over the same ranks, for the set-up's agreement and the
  // unique id's broadcast.
  Backend* bootstrap = nullptr;
  PeerAlarm* alarm = nullptr;
  int set_id = 0;
  int rank = 0;  // in the set
  int size = 1;
  std::vector<int> members;  // global ranks of the set, for notices
  int global_rank = 0;
  int local_rank = 0;  // picks the GPU of a rank that never had a tensor
  int host_id = 0;     // Topology::host_id: who shares a GPU with whom
  // The fused pieces of the pipeline (HB_FUSION_THRESHOLD).
  int64_t fusion_bytes = 0;
  // True once the runtime is shutting down: waits give up.
  std::function<bool()> stop_requested;
};

class NcclBackend : public Backend, public Memory {
 public:
  explicit NcclBackend(NcclBackendOptions options);
  ~NcclBackend() override;
  NcclBackend(const NcclBackend&) = delete;
  NcclBackend& operator=(const NcclBackend&) = delete;

  // Backend
  const char* name() const override { return "NCCL"; }
  bool Serves(int device) const override { return device >= 0; }
  Memory* memory() override { return this; }
  Status BeginBatch(int device, const std::vector<void*>& ready) override;
  bool ReducesAverage() const override { return true; }
  int64_t PieceBytes() const override;
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                   ReduceOp op) override;
  Status StartAllreduce(const void* in, void* out, int64_t count,
                        DataType dtype, ReduceOp op,
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

  // Memory (device memory of the bound GPU, on the copy stream)
  void* Allocate(int64_t bytes) override;
  void Free(void* ptr) override;
  Status Copy(void* dst, const void* src, int64_t bytes) override;
  Status Zero(void* dst, int64_t bytes) override;
  Status ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                    double factor) override;
  Status Synchronize() override;

 private:
  class EventPending;

  Status Bind(int device);
  Status SetUp(int device);
  // Queues a collective on the NCCL stream after the copy stream's work.
  Status Launch(const char* what, const std::function<ncclResult_t()>& call);
  // Launch, then wait for it.
  Status Run(const char* what, const std::function<ncclResult_t()>& call);
  // Waits for `event` (or for `stream`'s queued work), polling for
  // failures (see the class comment).
  Status Await(cudaEvent_t event, const char* what);
  Status AwaitStream(cudaStream_t stream, const char* what);
  // Aborts the communicator and fails the set's GPU collectives; `raise`
  // tells the peers (false when the failure is a peer's notice).
  Status Fail(const Status& why, bool raise);
  Status Types(DataType dtype, ReduceOp op, ncclDataType_t* type,
               ncclRedOp_t* red) const;

  NcclBackendOptions options_;
  const CudaApi& cuda_;
  const NcclApi& nccl_;
  bool bound_ = false;
  int device_ = -1;
  cudaStream_t copy_stream_ = nullptr;
  cudaStream_t nccl_stream_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;  // the copy stream's tail, per launch
  cudaEvent_t synced_ = nullptr;       // AwaitStream's marker
  ncclComm_t comm_ = nullptr;
  ncclComm_t self_ = nullptr;          // one-rank communicator: scaling
  Status failed_;                      // set once; every later call fails
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_NCCL_BACKEND_H_
