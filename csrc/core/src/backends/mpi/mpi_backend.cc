#include "backends/mpi/mpi_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "backends/half.h"
#include "backends/reduce_kernels.h"
#include "common/mpi_wait.h"

namespace hbcore {
namespace {

struct SumF {
  static float Apply(float a, float b) { return a + b; }
};
struct MinF {
  static float Apply(float a, float b) { return std::min(a, b); }
};
struct MaxF {
  static float Apply(float a, float b) { return std::max(a, b); }
};
struct ProdF {
  static float Apply(float a, float b) { return a * b; }
};

// MPI user function: inout[i] = in[i] (op) inout[i], via float.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float),
          typename Op>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = FromFloat(Op::Apply(ToFloat(a[i]), ToFloat(b[i])));
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void CreateHalfOps(MPI_Op ops[4]) {
  MPI_Op_create(&HalfReduce<ToFloat, FromFloat, SumF>, 1, &ops[0]);
  MPI_Op_create(&HalfReduce<ToFloat, FromFloat, MinF>, 1, &ops[1]);
  MPI_Op_create(&HalfReduce<ToFloat, FromFloat, MaxF>, 1, &ops[2]);
  MPI_Op_create(&HalfReduce<ToFloat, FromFloat, ProdF>, 1, &ops[3]);
}

int OpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProduct: return 3;
    default: return -1;
  }
}

Status TooLarge(const char* what) {
  return Status::Unsupported(std::string(what) +
                             ": a count or offset exceeds MPI's int range "
                             "(2^31 - 1); split the tensor");
}

std::vector<int> ToIntCounts(const std::vector<int64_t>& v, bool* ok) {
  std::vector<int> out(v.size());
  *ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] > INT_MAX) *ok = false;
    out[i] = static_cast<int>(v[i]);
  }
  return out;
}

std::vector<int> Displacements(const std::vector<int>& counts, bool* ok) {
  std::vector<int> displs(counts.size());
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (total > INT_MAX) *ok = false;
    displs[i] = static_cast<int>(total);
    total += counts[i];
  }
  return displs;
}

// An MPI_Iallreduce in flight. Waiting spins in MPI_Wait like a blocking
// allreduce would: this is the data plane, where the peers are mid-cycle.
class MpiPending : public Backend::Pending {
 public:
  explicit MpiPending(MPI_Request request) : request_(request) {}
  ~MpiPending() override {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  bool Test() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    rc_ = MPI_Test(&request_, &done, MPI_STATUS_IGNORE);
    return done != 0 || rc_ != MPI_SUCCESS;
  }
  Status Wait() override {
    if (request_ != MPI_REQUEST_NULL && rc_ == MPI_SUCCESS) {
      rc_ = MPI_Wait(&request_, MPI_STATUS_IGNORE);
    }
    return MpiStatus(rc_, "MPI_Iallreduce");
  }

 private:
  MPI_Request request_;
  int rc_ = MPI_SUCCESS;
};

}  // namespace

MpiBackend::MpiBackend(MPI_Comm comm, std::unique_ptr<MpiShmAllreduce> shm,
                       MPI_Comm cross,
                       std::unique_ptr<MpiHierAllgather> allgather,
                       std::unique_ptr<MpiRingAllreduce> ring)
    : comm_(comm),
      shm_(std::move(shm)),
      cross_(shm_ ? cross : MPI_COMM_NULL),
      hier_allgather_(std::move(allgather)),
      ring_(std::move(ring)),
      ring_across_(cross_ != MPI_COMM_NULL) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  CreateHalfOps<Float16ToFloat, FloatToFloat16>(half_ops_[0]);
  CreateHalfOps<BFloat16ToFloat, FloatToBFloat16>(half_ops_[1]);
}

MpiBackend::~MpiBackend() {
  for (auto& ops : half_ops_) {
    for (MPI_Op& op : ops) MPI_Op_free(&op);
  }
}

MPI_Datatype MpiBackend::MpiType(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kUInt16: return MPI_UINT16_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16: return MPI_UINT16_T;
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiBackend::MpiOp(DataType dtype, ReduceOp op) const {
  int index = OpIndex(op);
  if (index < 0) return MPI_OP_NULL;
  if (dtype == DataType::kFloat16) return half_ops_[0][index];
  if (dtype == DataType::kBFloat16) return half_ops_[1][index];
  if (dtype == DataType::kBool) {
    // Logical semantics: any (Sum, Max) / all (Min, Product).
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? MPI_LOR : MPI_LAND;
  }
  const MPI_Op ops[] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return ops[index];
}

Status MpiBackend::Allreduce(const void* in, void* out, int64_t count,
                             DataType dtype, ReduceOp op) {
  MPI_Op mpi_op = MpiOp(dtype, op);
  if (mpi_op == MPI_OP_NULL) {
    return Status::Unsupported(std::string("reduce op ") + ReduceOpName(op) +
                               " on the MPI backend");
  }
  if (UseCross() && ReduceSupported(dtype, op)) {
    // Across hosts a lone tensor goes hierarchical too: only 1/n of it
    // leaves each host per rank.
    const FusedLayout layout(dtype, {FusedTensor{in, out, count, 1.0, 1.0}});
    return AllreduceAcrossHosts(layout, op, [](const char*, std::chrono::steady_clock::time_point) {});
  }
  const int64_t elem = DataTypeSize(dtype);
  if (UseRing(count, dtype, op, false)) {
    std::unique_ptr<Pending> pending;
    Status s = StartAllreduce(in, out, count, dtype, op, &pending);
    return s.ok() ? pending->Wait() : s;
  }
  // MPI counts are int: reduce in chunks of at most 2^30 elements.
  constexpr int64_t kChunk = int64_t{1} << 30;
  for (int64_t off = 0; off < count || (count == 0 && off == 0);
       off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, count - off));
    char* dst = static_cast<char*>(out) + off * elem;
    const char* src = static_cast<const char*>(in) + off * elem;
    int rc = MPI_Allreduce(in == out ? MPI_IN_PLACE : src, dst, n,
                           MpiType(dtype), mpi_op, comm_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Allreduce");
    if (count == 0) break;
  }
  return Status::OK();
}

Status MpiBackend::StartAllreduce(const void* in, void* out, int64_t count,
                                  DataType dtype, ReduceOp op,
                                  std::unique_ptr<Pending>* pending) {
  if (UseRing(count, dtype, op, false)) {
    if (in != out) {
      std::memcpy(out, in, static_cast<size_t>(count * DataTypeSize(dtype)));
    }
    ring_->Start(out, count, dtype, op, pending);
    return Status::OK();
  }
  MPI_Op mpi_op = MpiOp(dtype, op);
  if (mpi_op == MPI_OP_NULL || count > INT_MAX) {
    return Backend::StartAllreduce(in, out, count, dtype, op, pending);
  }
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out,
                          static_cast<int>(count), MpiType(dtype), mpi_op,
                          comm_, &request);
  if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Iallreduce");
  *pending = std::make_unique<MpiPending>(request);
  return Status::OK();
}

bool MpiBackend::StartsFromLayout(int64_t count, DataType dtype,
                                  ReduceOp op) const {
  return UseRing(count, dtype, op, false);
}

Status MpiBackend::StartAllreduceFromLayout(
    const FusedLayout& layout, int64_t begin, int64_t count, void* buffer,
    ReduceOp op, std::unique_ptr<Pending>* pending) {
  ring_->StartFromLayout(layout, begin, count, buffer, op, pending);
  return Status::OK();
}

Status MpiBackend::AllreduceLayout(const FusedLayout& layout, ReduceOp op,
                                   const PhaseFn& phase) {
  // Every rank fails the same way here, before any collective.
  if (!ReduceSupported(layout.dtype(), op)) {
    return Status::Unsupported(std::string("reduce op ") + ReduceOpName(op) +
                               " on " + DataTypeName(layout.dtype()) +
                               " in shared memory");
  }
  if (UseCross()) return AllreduceAcrossHosts(layout, op, phase);
  return shm_->Allreduce(layout, op, phase);
}

Status MpiBackend::AllreduceAcrossHosts(const FusedLayout& layout,
                                        ReduceOp op, const PhaseFn& phase) {
  const MPI_Datatype type = MpiType(layout.dtype());
  const MPI_Op mpi_op = MpiOp(layout.dtype(), op);
  const MpiShmAllreduce::ChunkFn across = [&](void* data, int64_t count) {
    if (UseRing(count, layout.dtype(), op, true)) {
      return ring_->Allreduce(data, count, layout.dtype(), op);
    }
    // A chunk is at most a shared-memory slot, far below MPI's int limit.
    int rc = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), type,
                           mpi_op, cross_);
    return MpiStatus(rc, "MPI_Allreduce (across hosts)");
  };
  return shm_->Allreduce(layout, op, phase, &across);
}

Status MpiBackend::Allgatherv(const void* in, void* out,
                              const std::vector<int64_t>& bytes_per_rank) {
  // bytes_per_rank is the same on every rank, so is this choice.
  if (hier_allgather_ && tuning_.hierarchical_allgather &&
      hier_allgather_->Takes(bytes_per_rank)) {
    return hier_allgather_->Allgatherv(in, out, bytes_per_rank);
  }
  bool ok = true;
  std::vector<int> counts = ToIntCounts(bytes_per_rank, &ok);
  std::vector<int> displs = Displacements(counts, &ok);
  if (!ok) return TooLarge("allgather");
  int rc = MPI_Allgatherv(in, counts[rank_], MPI_BYTE, out, counts.data(),
                          displs.data(), MPI_BYTE, comm_);
  return MpiStatus(rc, "MPI_Allgatherv");
}

Status MpiBackend::Broadcast(void* buffer, int64_t bytes, int root) {
  constexpr int64_t kChunk = int64_t{1} << 30;
  for (int64_t off = 0; off < bytes; off += kChunk) {
    int n = static_cast<int>(std::min(kChunk, bytes - off));
    int rc = MPI_Bcast(static_cast<char*>(buffer) + off, n, MPI_BYTE, root,
                       comm_);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, "MPI_Bcast");
  }
  return Status::OK();
}

Status MpiBackend::Alltoallv(const void* in,
                             const std::vector<int64_t>& send_bytes, void* out,
                             const std::vector<int64_t>& recv_bytes) {
  bool ok = true;
  std::vector<int> scounts = ToIntCounts(send_bytes, &ok);
  std::vector<int> rcounts = ToIntCounts(recv_bytes, &ok);
  std::vector<int> sdispls = Displacements(scounts, &ok);
  std::vector<int> rdispls = Displacements(rcounts, &ok);
  if (!ok) return TooLarge("alltoall");
  int rc = MPI_Alltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out,
                         rcounts.data(), rdispls.data(), MPI_BYTE, comm_);
  return MpiStatus(rc, "MPI_Alltoallv");
}

Status MpiBackend::Reducescatter(const void* in, void* out,
                                 const std::vector<int64_t>& counts,
                                 DataType dtype, ReduceOp op) {
  MPI_Op mpi_op = MpiOp(dtype, op);
  if (mpi_op == MPI_OP_NULL) {
    return Status::Unsupported(std::string("reduce op ") + ReduceOpName(op) +
                               " on the MPI backend");
  }
  bool ok = true;
  std::vector<int> icounts = ToIntCounts(counts, &ok);
  if (!ok) return TooLarge("reducescatter");
  int rc = MPI_Reduce_scatter(in, out, icounts.data(), MpiType(dtype), mpi_op,
                              comm_);
  return MpiStatus(rc, "MPI_Reduce_scatter");
}

Status MpiBackend::Barrier() {
  return MpiStatus(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace hbcore
