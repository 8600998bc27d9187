#include "backends/nccl/nccl_backend.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "backends/half.h"
#include "common/logging.h"

namespace hbcore {
namespace {

// Waits poll with a backoff: yields first (GPU collectives of small
// buffers finish in microseconds), then sleeps of up to this long.
constexpr int kYieldPolls = 200;
constexpr auto kMaxPollSleep = std::chrono::microseconds(100);

// The scalar of a pre-multiplied sum, in the tensor's own type.
union Scalar {
  int8_t i8;
  uint8_t u8;
  int32_t i32;
  int64_t i64;
  uint16_t half;
  float f32;
  double f64;
};

bool ToScalar(DataType dtype, double factor, Scalar* s) {
  const bool integral = factor == std::trunc(factor);
  switch (dtype) {
    case DataType::kFloat16: s->half = FloatToFloat16(static_cast<float>(factor)); return true;
    case DataType::kBFloat16: s->half = FloatToBFloat16(static_cast<float>(factor)); return true;
    case DataType::kFloat32: s->f32 = static_cast<float>(factor); return true;
    case DataType::kFloat64: s->f64 = factor; return true;
    case DataType::kInt8: s->i8 = static_cast<int8_t>(factor); return integral;
    case DataType::kUInt8: s->u8 = static_cast<uint8_t>(factor); return integral;
    case DataType::kInt32: s->i32 = static_cast<int32_t>(factor); return integral;
    case DataType::kInt64: s->i64 = static_cast<int64_t>(factor); return integral;
    default: return false;
  }
}

// One member's GPU as the others see it: its host (Topology::host_id) and
// the GPU's PCI bus id, which names one GPU across the processes of a host
// whatever their device numbering (CUDA_VISIBLE_DEVICES). Exchanged as raw
// bytes between ranks of one build; zero-filled, so the id ends in a NUL.
struct GpuIdentity {
  int32_t host = 0;
  char bus_id[36] = {};

  bool SameGpu(const GpuIdentity& other) const {
    return host == other.host &&
           std::memcmp(bus_id, other.bus_id, sizeof(bus_id)) == 0;
  }
};

// Unsupported when two members of the set are on one GPU of one host. Every
// member gathers the same table, so all of them refuse alike.
Status RefuseSharedGpu(const NcclBackendOptions& o, const GpuIdentity& me) {
  std::vector<GpuIdentity> all(o.size);
  Status s = o.bootstrap->Allgatherv(
      &me, all.data(), std::vector<int64_t>(o.size, sizeof(GpuIdentity)));
  if (!s.ok()) return s;
  for (size_t i = 0; i < all.size(); ++i) {
    std::vector<int> same;  // global ranks on member i's GPU
    for (size_t j = i; j < all.size(); ++j) {
      if (all[i].SameGpu(all[j])) same.push_back(o.members[j]);
    }
    if (same.size() < 2) continue;
    std::string ranks;
    for (size_t k = 0; k < same.size(); ++k) {
      ranks += (k == 0 ? "" : k + 1 == same.size() ? " and " : ", ") +
               std::to_string(same[k]);
    }
    return Status::Unsupported(
        "ranks " + ranks + " are on the same GPU (PCI bus id " +
        std::string(all[i].bus_id) + " of one host), and NCCL cannot run "
        "two ranks of a communicator on one GPU: give each process a GPU of "
        "its own (pin it by local_rank(), or start one process per GPU with "
        "python -m hbcore.run), or keep these tensors on the CPU");
  }
  return Status::OK();
}

}  // namespace

// An allreduce in flight: complete when its event (recorded on the NCCL
// stream after it) is.
class NcclBackend::EventPending : public Backend::Pending {
 public:
  EventPending(NcclBackend* backend, cudaEvent_t event)
      : backend_(backend), event_(event) {}
  ~EventPending() override { backend_->cuda_.EventDestroy(event_); }
  bool Test() override {
    return backend_->cuda_.EventQuery(event_) == kCudaSuccess;
  }
  Status Wait() override { return backend_->Await(event_, "ncclAllReduce"); }

 private:
  NcclBackend* backend_;
  cudaEvent_t event_;
};

NcclBackend::NcclBackend(NcclBackendOptions options)
    : options_(std::move(options)),
      cuda_(options_.gpu->cuda()),
      nccl_(options_.gpu->nccl()) {}

NcclBackend::~NcclBackend() {
  if (!bound_) return;
  // Runs on the thread that shut hbcore down: it keeps its current device.
  DeviceGuard on_device(*options_.gpu, device_);
  if (comm_ != nullptr) {
    // Nothing is in flight between batches; a destroy waits for the
    // communicator's own work.
    nccl_.CommDestroy(comm_);
  }
  if (self_ != nullptr) nccl_.CommDestroy(self_);
  if (copies_done_ != nullptr) cuda_.EventDestroy(copies_done_);
  if (synced_ != nullptr) cuda_.EventDestroy(synced_);
  if (copy_stream_ != nullptr) cuda_.StreamDestroy(copy_stream_);
  if (nccl_stream_ != nullptr) cuda_.StreamDestroy(nccl_stream_);
}

int64_t NcclBackend::PieceBytes() const {
  // A tuned piece never exceeds the fusion buffers it is packed into.
  const int64_t buffer = std::max<int64_t>(options_.fusion_bytes, 1);
  return tuning_.piece_bytes > 0 ? std::min(tuning_.piece_bytes, buffer)
                                 : buffer;
}

Status NcclBackend::BeginBatch(int device, const std::vector<void*>& ready) {
  if (!failed_.ok()) return failed_;
  if (device < 0) {
    // A rank without the tensor (joined): its bound GPU, else the one its
    // local rank would use.
    int count = 0;
    if (bound_) {
      device = device_;
    } else if (cuda_.GetDeviceCount(&count) == kCudaSuccess && count > 0) {
      device = options_.local_rank % count;
    } else {
      device = 0;
    }
  }
  Status s = Bind(device);
  if (!s.ok()) return s;
  for (void* event : ready) {
    cudaError_t e = cuda_.StreamWaitEvent(
        copy_stream_, static_cast<cudaEvent_t>(event), 0);
    if (e != kCudaSuccess) {
      return Fail(options_.gpu->CudaError("cudaStreamWaitEvent on an input's "
                                          "ready event", e),
                  true);
    }
  }
  return Status::OK();
}

Status NcclBackend::Bind(int device) {
  if (bound_) {
    if (device != device_) {
      return Status::InvalidArgument(
          "hbcore drives one GPU per process: this rank's NCCL communicator "
          "is on GPU " + std::to_string(device_) + ", the tensor on GPU " +
          std::to_string(device) + " (pin each process to its own device, "
          "e.g. by local_rank())");
    }
    cudaError_t e = cuda_.SetDevice(device_);
    if (e != kCudaSuccess) return options_.gpu->CudaError("cudaSetDevice", e);
    return Status::OK();
  }
  Status s = SetUp(device);
  if (!s.ok()) return Fail(s, false);
  bound_ = true;
  return Status::OK();
}

Status NcclBackend::SetUp(int device) {
  device_ = device;
  const GpuLibraries& gpu = *options_.gpu;
  // 1. Local set-up on every member.
  Status local;
  cudaError_t e = cuda_.SetDevice(device);
  if (e != kCudaSuccess) {
    local = gpu.CudaError("cudaSetDevice(" + std::to_string(device) + ")", e);
  }
  if (local.ok() && ((e = cuda_.StreamCreateWithFlags(
                          &copy_stream_, kCudaStreamNonBlocking)) !=
                         kCudaSuccess ||
                     (e = cuda_.StreamCreateWithFlags(
                          &nccl_stream_, kCudaStreamNonBlocking)) !=
                         kCudaSuccess ||
                     (e = cuda_.EventCreateWithFlags(
                          &copies_done_, kCudaEventDisableTiming)) !=
                         kCudaSuccess ||
                     (e = cuda_.EventCreateWithFlags(
                          &synced_, kCudaEventDisableTiming)) !=
                         kCudaSuccess)) {
    local = gpu.CudaError("creating the NCCL backend's streams and events", e);
  }
  GpuIdentity me;
  me.host = options_.host_id;
  if (local.ok() &&
      (e = cuda_.DeviceGetPCIBusId(me.bus_id, sizeof(me.bus_id) - 1,
                                   device)) != kCudaSuccess) {
    local = gpu.CudaError("cudaDeviceGetPCIBusId(" + std::to_string(device) +
                          ")", e);
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (local.ok() && options_.rank == 0) {
    ncclResult_t r = nccl_.GetUniqueId(&id);
    if (r != kNcclSuccess) local = gpu.NcclError("ncclGetUniqueId", r);
  }
  // 2. Agreement: a member that failed must not leave the others waiting
  // in ncclCommInitRank.
  int32_t ok = local.ok() ? 1 : 0, all_ok = 0;
  Status s = options_.bootstrap->Allreduce(&ok, &all_ok, 1, DataType::kInt32,
                                           ReduceOp::kMin);
  if (!s.ok()) return s;
  if (!local.ok()) return local;
  if (all_ok == 0) {
    return Status::Internal("another rank of the set could not set up its "
                            "GPU (see its error)");
  }
  // 3. One GPU per member: NCCL refuses a communicator with two ranks on
  // one GPU (ncclInvalidUsage, its reason printed only with NCCL_DEBUG), so
  // every member checks the same table first and they all refuse alike.
  s = RefuseSharedGpu(options_, me);
  if (!s.ok()) return s;
  // 4. Rank 0's unique id over MPI, then the communicator.
  s = options_.bootstrap->Broadcast(&id, sizeof(id), 0);
  if (!s.ok()) return s;
  ncclResult_t r =
      nccl_.CommInitRank(&comm_, options_.size, id, options_.rank);
  if (r != kNcclSuccess) {
    comm_ = nullptr;
    return gpu.NcclError("ncclCommInitRank", r);
  }
  ncclUniqueId self_id;
  r = nccl_.GetUniqueId(&self_id);
  if (r == kNcclSuccess) r = nccl_.CommInitRank(&self_, 1, self_id, 0);
  if (r != kNcclSuccess) {
    self_ = nullptr;
    return gpu.NcclError("creating the one-rank scaling communicator", r);
  }
  HB_LOG(kDebug, "NCCL " << gpu.NcclVersion() << " communicator of "
                 << options_.size << " ranks on GPU " << device);
  return Status::OK();
}

Status NcclBackend::Fail(const Status& why, bool raise) {
  if (!failed_.ok()) return failed_;
  const bool had_comm = comm_ != nullptr;
  if (had_comm) {
    nccl_.CommAbort(comm_);
    comm_ = nullptr;
  }
  const std::string where = "rank " + std::to_string(options_.global_rank);
  // A shut-down runtime, and a set-up that refused (two ranks on one GPU),
  // keep their kind; anything else is an internal failure.
  const bool keeps_code =
      why.code() == HB_ERR_SHUTDOWN || why.code() == HB_ERR_UNSUPPORTED;
  const char* aborted = had_comm ? "the NCCL communicator was aborted; " : "";
  failed_ = Status(keeps_code ? why.code() : HB_ERR_INTERNAL,
                   "GPU collective failed on " + where + ": " +
                       why.message() + " (" + aborted +
                       "later GPU collectives of this process set fail)");
  if (raise) {
    options_.alarm->Raise(options_.set_id, options_.members,
                          where + ": " + why.message());
  }
  HB_LOG(kWarning, failed_.message());
  return failed_;
}

Status NcclBackend::Await(cudaEvent_t event, const char* what) {
  // NCCL's asynchronous error counts even once the work completed (a
  // failed collective may leave its stream free).
  auto async_error = [&]() -> Status {
    if (comm_ == nullptr) return Status::OK();
    ncclResult_t async = kNcclSuccess;
    ncclResult_t r = nccl_.CommGetAsyncError(comm_, &async);
    if (r != kNcclSuccess || async == kNcclSuccess ||
        async == kNcclInProgress) {
      return Status::OK();
    }
    return Fail(options_.gpu->NcclError(
                    std::string(what) + " (asynchronous error)", async),
                true);
  };
  for (int polls = 0;; ++polls) {
    cudaError_t e = cuda_.EventQuery(event);
    if (e == kCudaSuccess) return async_error();
    if (e != kCudaErrorNotReady) {
      return Fail(options_.gpu->CudaError(what, e), true);
    }
    Status s = async_error();
    if (!s.ok()) return s;
    std::string why;
    if (options_.alarm->Poll(options_.set_id, &why)) {
      return Fail(Status::Internal("a peer's GPU collective failed: " + why),
                  false);
    }
    if (options_.stop_requested && options_.stop_requested()) {
      return Fail(Status::Shutdown(std::string("hbcore shut down during ") +
                                   what),
                  true);
    }
    if (polls < kYieldPolls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min(
          kMaxPollSleep, std::chrono::microseconds(polls - kYieldPolls + 1)));
    }
  }
}

Status NcclBackend::AwaitStream(cudaStream_t stream, const char* what) {
  cudaError_t e = cuda_.EventRecord(synced_, stream);
  if (e != kCudaSuccess) return Fail(options_.gpu->CudaError(what, e), true);
  return Await(synced_, what);
}

Status NcclBackend::Launch(const char* what,
                           const std::function<ncclResult_t()>& call) {
  if (!failed_.ok()) return failed_;
  cudaError_t e = cuda_.EventRecord(copies_done_, copy_stream_);
  if (e == kCudaSuccess) e = cuda_.StreamWaitEvent(nccl_stream_, copies_done_, 0);
  if (e != kCudaSuccess) {
    return Fail(options_.gpu->CudaError("ordering a collective after its "
                                        "copies",
                                        e),
                true);
  }
  ncclResult_t r = call();
  if (r != kNcclSuccess && r != kNcclInProgress) {
    return Fail(options_.gpu->NcclError(what, r), true);
  }
  return Status::OK();
}

Status NcclBackend::Run(const char* what,
                        const std::function<ncclResult_t()>& call) {
  Status s = Launch(what, call);
  if (!s.ok()) return s;
  return AwaitStream(nccl_stream_, what);
}

Status NcclBackend::Types(DataType dtype, ReduceOp op, ncclDataType_t* type,
                          ncclRedOp_t* red) const {
  switch (dtype) {
    case DataType::kUInt8: *type = kNcclUint8; break;
    case DataType::kInt8: *type = kNcclInt8; break;
    case DataType::kInt32: *type = kNcclInt32; break;
    case DataType::kInt64: *type = kNcclInt64; break;
    case DataType::kFloat16: *type = kNcclFloat16; break;
    case DataType::kBFloat16: *type = kNcclBfloat16; break;
    case DataType::kFloat32: *type = kNcclFloat32; break;
    case DataType::kFloat64: *type = kNcclFloat64; break;
    case DataType::kBool: *type = kNcclUint8; break;
    default:
      return Status::Unsupported(std::string("NCCL has no ") +
                                 DataTypeName(dtype) + " type");
  }
  const bool boolean = dtype == DataType::kBool;
  switch (op) {
    // Bools are 0/1 bytes: logical or is max, logical and is min.
    case ReduceOp::kSum: *red = boolean ? kNcclMax : kNcclSum; break;
    case ReduceOp::kProduct: *red = boolean ? kNcclMin : kNcclProd; break;
    case ReduceOp::kMin: *red = kNcclMin; break;
    case ReduceOp::kMax: *red = kNcclMax; break;
    case ReduceOp::kAverage: *red = kNcclAvg; break;
    default:
      return Status::Unsupported(std::string("NCCL has no ") +
                                 ReduceOpName(op) + " reduction");
  }
  return Status::OK();
}

Status NcclBackend::Allreduce(const void* in, void* out, int64_t count,
                              DataType dtype, ReduceOp op) {
  ncclDataType_t type;
  ncclRedOp_t red;
  Status s = Types(dtype, op, &type, &red);
  if (!s.ok()) return s;
  return Run("ncclAllReduce", [&] {
    return nccl_.AllReduce(in, out, static_cast<size_t>(count), type, red,
                           comm_, nccl_stream_);
  });
}

Status NcclBackend::StartAllreduce(const void* in, void* out, int64_t count,
                                   DataType dtype, ReduceOp op,
                                   std::unique_ptr<Pending>* pending) {
  ncclDataType_t type;
  ncclRedOp_t red;
  Status s = Types(dtype, op, &type, &red);
  if (!s.ok()) return s;
  s = Launch("ncclAllReduce", [&] {
    return nccl_.AllReduce(in, out, static_cast<size_t>(count), type, red,
                           comm_, nccl_stream_);
  });
  if (!s.ok()) return s;
  cudaEvent_t event = nullptr;
  cudaError_t e = cuda_.EventCreateWithFlags(&event, kCudaEventDisableTiming);
  if (e == kCudaSuccess) e = cuda_.EventRecord(event, nccl_stream_);
  if (e != kCudaSuccess) {
    if (event != nullptr) cuda_.EventDestroy(event);
    return Fail(options_.gpu->CudaError("recording an allreduce's event", e),
                true);
  }
  *pending = std::make_unique<EventPending>(this, event);
  return Status::OK();
}

Status NcclBackend::Allgatherv(const void* in, void* out,
                               const std::vector<int64_t>& bytes_per_rank) {
  bool even = true;
  for (int64_t b : bytes_per_rank) even = even && b == bytes_per_rank[0];
  if (even) {
    return Run("ncclAllGather", [&] {
      return nccl_.AllGather(in, out, static_cast<size_t>(bytes_per_rank[0]),
                             kNcclUint8, comm_, nccl_stream_);
    });
  }
  // Uneven first dimensions: one broadcast per rank into its own offset,
  // grouped so NCCL runs them together.
  return Run("ncclBroadcast (allgather)", [&] {
    ncclResult_t r = nccl_.GroupStart();
    char* at = static_cast<char*>(out);
    for (int root = 0; root < options_.size && r == kNcclSuccess; ++root) {
      const int64_t bytes = bytes_per_rank[root];
      if (bytes > 0) {
        r = nccl_.Broadcast(root == options_.rank ? in : at, at,
                            static_cast<size_t>(bytes), kNcclUint8, root,
                            comm_, nccl_stream_);
      }
      at += bytes;
    }
    ncclResult_t end = nccl_.GroupEnd();
    return r != kNcclSuccess ? r : end;
  });
}

Status NcclBackend::Broadcast(void* buffer, int64_t bytes, int root) {
  return Run("ncclBroadcast", [&] {
    return nccl_.Broadcast(buffer, buffer, static_cast<size_t>(bytes),
                           kNcclUint8, root, comm_, nccl_stream_);
  });
}

Status NcclBackend::Alltoallv(const void* in,
                              const std::vector<int64_t>& send_bytes,
                              void* out,
                              const std::vector<int64_t>& recv_bytes) {
  const char* send = static_cast<const char*>(in);
  char* recv = static_cast<char*>(out);
  std::vector<int64_t> send_at(options_.size, 0), recv_at(options_.size, 0);
  for (int p = 1; p < options_.size; ++p) {
    send_at[p] = send_at[p - 1] + send_bytes[p - 1];
    recv_at[p] = recv_at[p - 1] + recv_bytes[p - 1];
  }
  // This rank's own rows are a device copy; the rest one group of
  // send/receive pairs.
  const int me = options_.rank;
  Status s = Copy(recv + recv_at[me], send + send_at[me], send_bytes[me]);
  if (!s.ok()) return s;
  return Run("ncclSend/ncclRecv (alltoall)", [&] {
    ncclResult_t r = nccl_.GroupStart();
    for (int p = 0; p < options_.size && r == kNcclSuccess; ++p) {
      if (p == me) continue;
      if (send_bytes[p] > 0) {
        r = nccl_.Send(send + send_at[p], static_cast<size_t>(send_bytes[p]),
                       kNcclUint8, p, comm_, nccl_stream_);
      }
      if (r == kNcclSuccess && recv_bytes[p] > 0) {
        r = nccl_.Recv(recv + recv_at[p], static_cast<size_t>(recv_bytes[p]),
                       kNcclUint8, p, comm_, nccl_stream_);
      }
    }
    ncclResult_t end = nccl_.GroupEnd();
    return r != kNcclSuccess ? r : end;
  });
}

Status NcclBackend::Reducescatter(const void* in, void* out,
                                  const std::vector<int64_t>& counts,
                                  DataType dtype, ReduceOp op) {
  ncclDataType_t type;
  ncclRedOp_t red;
  Status s = Types(dtype, op, &type, &red);
  if (!s.ok()) return s;
  bool even = true;
  for (int64_t c : counts) even = even && c == counts[0];
  if (even) {
    return Run("ncclReduceScatter", [&] {
      return nccl_.ReduceScatter(in, out, static_cast<size_t>(counts[0]),
                                 type, red, comm_, nccl_stream_);
    });
  }
  // Uneven blocks: one reduce per rank onto that rank, grouped.
  const int64_t elem = DataTypeSize(dtype);
  return Run("ncclReduce (reducescatter)", [&] {
    ncclResult_t r = nccl_.GroupStart();
    const char* at = static_cast<const char*>(in);
    for (int root = 0; root < options_.size && r == kNcclSuccess; ++root) {
      if (counts[root] > 0) {
        r = nccl_.Reduce(at, out, static_cast<size_t>(counts[root]), type,
                         red, root, comm_, nccl_stream_);
      }
      at += counts[root] * elem;
    }
    ncclResult_t end = nccl_.GroupEnd();
    return r != kNcclSuccess ? r : end;
  });
}

Status NcclBackend::Barrier() {
  // Barriers are host requests; served here only for completeness.
  return options_.bootstrap->Barrier();
}

void* NcclBackend::Allocate(int64_t bytes) {
  void* ptr = nullptr;
  cudaError_t e = cuda_.Malloc(&ptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (e != kCudaSuccess) {
    HB_LOG(kWarning, options_.gpu->CudaError(
                         "cudaMalloc of " + std::to_string(bytes) + " bytes",
                         e).message());
    return nullptr;
  }
  return ptr;
}

void NcclBackend::Free(void* ptr) {
  // cudaFree waits for the device; nothing of ours still uses the buffer
  // (batches end synchronized).
  if (ptr != nullptr) cuda_.Free(ptr);
}

Status NcclBackend::Copy(void* dst, const void* src, int64_t bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes <= 0 || dst == src) return Status::OK();
  cudaError_t e = cuda_.MemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                    kCudaMemcpyDefault, copy_stream_);
  if (e != kCudaSuccess) {
    return Fail(options_.gpu->CudaError("cudaMemcpyAsync", e), true);
  }
  return Status::OK();
}

Status NcclBackend::Zero(void* dst, int64_t bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes <= 0) return Status::OK();
  cudaError_t e =
      cuda_.MemsetAsync(dst, 0, static_cast<size_t>(bytes), copy_stream_);
  if (e != kCudaSuccess) {
    return Fail(options_.gpu->CudaError("cudaMemsetAsync", e), true);
  }
  return Status::OK();
}

Status NcclBackend::ScaledCopy(void* dst, const void* src, int64_t count,
                               DataType dtype, double factor) {
  if (factor == 1.0 || dtype == DataType::kBool) {
    return Copy(dst, src, count * DataTypeSize(dtype));
  }
  if (!failed_.ok()) return failed_;
  Scalar scalar;
  if (!ToScalar(dtype, factor, &scalar)) {
    return Status::Unsupported(
        "scaling a GPU " + std::string(DataTypeName(dtype)) + " tensor by " +
        std::to_string(factor) + ": NCCL's pre-multiplied sum takes a "
        "scalar of the tensor's type (use a floating-point tensor, or an "
        "integer factor)");
  }
  ncclDataType_t type;
  ncclRedOp_t unused;
  Status s = Types(dtype, ReduceOp::kSum, &type, &unused);
  if (!s.ok()) return s;
  // One-rank communicator: the "sum" of one contribution times the scalar.
  ncclRedOp_t op;
  ncclResult_t r = nccl_.RedOpCreatePreMulSum(&op, &scalar, type,
                                              kNcclScalarHostImmediate, self_);
  if (r == kNcclSuccess) {
    r = nccl_.AllReduce(src, dst, static_cast<size_t>(count), type, op, self_,
                        copy_stream_);
    ncclResult_t destroyed = nccl_.RedOpDestroy(op, self_);
    if (r == kNcclSuccess) r = destroyed;
  }
  if (r != kNcclSuccess) {
    return Fail(options_.gpu->NcclError("scaling by a pre-multiplied sum", r),
                true);
  }
  return Status::OK();
}

Status NcclBackend::Synchronize() {
  if (!failed_.ok()) return failed_;
  if (!bound_) return Status::OK();
  Status s = AwaitStream(copy_stream_, "the copy stream");
  if (s.ok()) s = AwaitStream(nccl_stream_, "the NCCL stream");
  return s;
}

}  // namespace hbcore
