// Runtime's checks of submitted requests (hb_enqueue): what can be
// validated locally, on the submitting thread, before anything is queued.
#include <cmath>

#include "runtime/runtime.h"

namespace hbcore {
namespace {

const char* OpName(int op) {
  return IsValidOpType(op) ? OpTypeName(static_cast<OpType>(op)) : "unknown";
}

std::string IdList(const std::map<int, ProcessSetInfo>& table) {
  std::string out;
  for (const auto& kv : table) {
    out += (out.empty() ? "" : ", ") + std::to_string(kv.first);
  }
  return out;
}

}  // namespace

Status Runtime::ValidateGpu(const hb_request& r, const std::string& name,
                            TensorEntry* entry) const {
  const std::string what = std::string(OpName(r.op)) + " of GPU tensor '" +
                           name + "' (device " + std::to_string(r.device) +
                           ")";
  if (r.device < 0) {
    return Status::InvalidArgument(what + ": bad device ordinal");
  }
  if (!gpu_) {
    return Status::Unsupported(what + ": GPU tensors need NCCL and the CUDA "
                               "runtime: " + gpu_missing_);
  }
  const DataType dtype = static_cast<DataType>(r.dtype);
  if (dtype == DataType::kUInt16 || dtype == DataType::kInt16) {
    return Status::Unsupported(what + ": NCCL has no " +
                               DataTypeName(dtype) + " type");
  }
  if (r.ready_event != nullptr) {
    entry->ready_event = r.ready_event;
    return Status::OK();
  }
  // Order after everything queued on the producer's stream so far: an
  // event of our own recorded there now, on the tensor's device (the
  // caller's thread keeps its current device).
  const CudaApi& cuda = gpu_->cuda();
  cudaEvent_t event = nullptr;
  cudaError_t e = kCudaSuccess;
  {
    DeviceGuard on_device(*gpu_, r.device);
    if (!on_device.status().ok()) return on_device.status();
    e = cuda.EventCreateWithFlags(&event, kCudaEventDisableTiming);
    if (e == kCudaSuccess) {
      e = cuda.EventRecord(event, static_cast<cudaStream_t>(r.stream));
    }
  }
  if (e != kCudaSuccess) {
    if (event != nullptr) cuda.EventDestroy(event);
    return gpu_->CudaError(what + ": recording its ready event", e);
  }
  const GpuLibraries* gpu = gpu_.get();
  entry->own_event = std::shared_ptr<void>(
      event, [gpu](void* ev) {
        gpu->cuda().EventDestroy(static_cast<cudaEvent_t>(ev));
      });
  entry->ready_event = event;
  return Status::OK();
}

Status Runtime::Validate(const hb_request& r, const ProcessSetInfo& set,
                         TensorEntry* entry) const {
  // Splits and set ranks count the set's members; a root is a global rank.
  const int size = set.size();
  const int world = topology().size;
  if (r.name == nullptr || r.name[0] == '\0') {
    return Status::InvalidArgument("tensor name must be a non-empty string");
  }
  const std::string name = r.name;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(OpName(r.op)) + " of tensor '" +
                                   name + "': " + why);
  };
  if (!IsValidOpType(r.op)) return bad("unknown operation " + std::to_string(r.op));
  if (!IsValidDataType(r.dtype)) return bad("unknown data type " + std::to_string(r.dtype));
  if (!IsValidReduceOp(r.reduce_op)) {
    return bad("unknown reduce op " + std::to_string(r.reduce_op));
  }
  if (r.done == nullptr) return bad("no completion callback");
  if (r.ndim < 0 || (r.ndim > 0 && r.shape == nullptr)) return bad("bad shape");
  if (r.op == HB_JOIN && set.id != 0) {
    return bad("join is defined on the global process set only (got process "
               "set " + std::to_string(set.id) + ")");
  }
  Request& q = entry->request;
  q.rank = set.SetRank(topology().rank);
  entry->process_set_id = set.id;
  q.name = name;
  q.op = static_cast<OpType>(r.op);
  q.reduce_op = static_cast<ReduceOp>(r.reduce_op);
  q.dtype = static_cast<DataType>(r.dtype);
  q.shape.assign(r.shape, r.shape + r.ndim);
  q.root_rank = r.root_rank;
  q.prescale = r.prescale_factor;
  q.postscale = r.postscale_factor;
  q.device = r.device;
  for (int64_t d : q.shape) {
    if (d < 0) return bad("negative dimension in shape " + ShapeString(q.shape));
  }
  if (!std::isfinite(q.prescale) || !std::isfinite(q.postscale)) {
    return bad("scale factors must be finite");
  }
  if (q.device != HB_DEVICE_CPU) {
    Status s = ValidateGpu(r, name, entry);
    if (!s.ok()) return s;
  }
  const bool has_data = q.op != OpType::kBarrier && q.op != OpType::kJoin;
  if (has_data && NumElements(q.shape) > 0 && r.input == nullptr) {
    return bad("input buffer is null");
  }
  switch (q.op) {
    case OpType::kAllreduce:
    case OpType::kReducescatter:
      if (q.reduce_op == ReduceOp::kAdasum) {
        return Status::Unsupported(
            std::string(OpName(r.op)) + " of tensor '" + name +
            "': the Adasum reduction is not supported by hbcore; use Sum or "
            "Average");
      }
      if (q.dtype == DataType::kBool && q.reduce_op == ReduceOp::kAverage) {
        return bad("Average is not defined for bool tensors; use Sum (logical "
                   "or) or Min (logical and)");
      }
      if (q.op == OpType::kAllreduce && r.output == nullptr &&
          NumElements(q.shape) > 0) {
        return bad("output buffer is null");
      }
      if (q.op == OpType::kReducescatter && q.shape.empty()) {
        return bad("needs a tensor with at least one dimension");
      }
      break;
    case OpType::kBroadcast:
      if (q.root_rank < 0 || q.root_rank >= world) {
        return bad("invalid root rank " + std::to_string(q.root_rank) +
                   " (must be in [0, " + std::to_string(world) + "))");
      }
      if (set.SetRank(q.root_rank) < 0) {
        return bad("root rank " + std::to_string(q.root_rank) +
                   " is not a member of process set " +
                   std::to_string(set.id) + " (" + RankList(set.ranks) + ")");
      }
      if (r.output == nullptr && NumElements(q.shape) > 0) {
        return bad("output buffer is null");
      }
      break;
    case OpType::kAllgather:
      if (q.shape.empty()) return bad("needs a tensor with at least one dimension");
      break;
    case OpType::kAlltoall: {
      if (q.shape.empty()) return bad("needs a tensor with at least one dimension");
      if (r.num_splits == 0) {
        if (q.shape[0] % size != 0) {
          return bad("first dimension " + std::to_string(q.shape[0]) +
                     " is not divisible by the number of ranks " +
                     std::to_string(size) + set.Suffix() + "; pass splits");
        }
        q.splits.assign(size, q.shape[0] / size);
      } else {
        if (r.num_splits != size || r.splits == nullptr) {
          return bad("splits has " + std::to_string(r.num_splits) +
                     " entries but there are " + std::to_string(size) +
                     " ranks" + set.Suffix());
        }
        q.splits.assign(r.splits, r.splits + r.num_splits);
        int64_t sum = 0;
        for (int64_t s : q.splits) {
          if (s < 0) return bad("splits " + ShapeString(q.splits) + " has a negative entry");
          sum += s;
        }
        if (sum != q.shape[0]) {
          return bad("splits " + ShapeString(q.splits) + " sum to " +
                     std::to_string(sum) + " but the first dimension is " +
                     std::to_string(q.shape[0]));
        }
      }
      break;
    }
    case OpType::kBarrier:
    case OpType::kJoin:
    case OpType::kProcessSetAdd:  // never submitted by a front end
    case OpType::kProcessSetRemove:
      break;
  }
  if ((q.op == OpType::kAllgather || q.op == OpType::kAlltoall ||
       q.op == OpType::kReducescatter) &&
      r.alloc == nullptr) {
    return bad("no output allocator");
  }
  entry->input = r.input;
  entry->output = r.output;
  entry->alloc = r.alloc;
  entry->done = r.done;
  entry->user = r.user;
  return Status::OK();
}

Status Runtime::SetsOf(const hb_request* requests, int count,
                       std::map<int, ProcessSetInfo>* sets) {
  const int rank = topology().rank;
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < count; ++i) {
    const int id = requests[i].process_set_id;
    if (id == 0 || sets->count(id)) continue;
    auto it = set_table_.find(id);
    const std::string what =
        std::string(OpName(requests[i].op)) + " of tensor '" +
        (requests[i].name ? requests[i].name : "") + "': ";
    if (it == set_table_.end()) {
      return Status::InvalidArgument(
          what + "process set " + std::to_string(id) +
          " does not exist (process sets: " + IdList(set_table_) + ")");
    }
    if (it->second.SetRank(rank) < 0) {
      return Status::InvalidArgument(
          what + "rank " + std::to_string(rank) +
          " is not a member of process set " + std::to_string(id) + " (" +
          RankList(it->second.ranks) + "); only members may submit on it");
    }
    (*sets)[id] = it->second;
  }
  return Status::OK();
}

}  // namespace hbcore
