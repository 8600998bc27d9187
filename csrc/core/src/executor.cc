#include "executor.h"

#include <algorithm>
#include <cstring>

#include "logging.h"
#include "scaling.h"

namespace hbcore {
namespace {

Shape RowShape(const Shape& shape) {
  return Shape(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
}

int64_t RowBytes(const Response& r) {
  return NumElements(RowShape(r.shape)) * DataTypeSize(r.dtype);
}

ReduceOp BackendOp(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}

double PostScale(const Response& r, int size) {
  return r.reduce_op == ReduceOp::kAverage ? r.postscale / size
                                           : r.postscale;
}

const char* PhaseName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kReducescatter: return "REDUCESCATTER";
    case OpType::kBarrier: return "BARRIER";
    case OpType::kJoin: return "JOIN";
    case OpType::kProcessSetAdd:
    case OpType::kProcessSetRemove: return "PROCESS_SET";
  }
  return "UNKNOWN";
}

// Output buffer from the front end's allocator, or a discard buffer for a
// rank without an entry.
void* AllocateOutput(TensorEntry* e, const Shape& shape,
                     std::vector<char>* discard, int64_t bytes) {
  if (e == nullptr) {
    discard->resize(std::max<int64_t>(bytes, 1));
    return discard->data();
  }
  if (e->alloc == nullptr) return e->output;
  return e->alloc(e->user, static_cast<int>(shape.size()), shape.data());
}

}  // namespace

Executor::Executor(int rank, int size, std::vector<Backend*> backends,
                   Timeline* timeline)
    : rank_(rank), size_(size), backends_(std::move(backends)),
      timeline_(timeline) {}

Backend* Executor::BackendFor(int device) const {
  for (Backend* b : backends_) {
    if (b->Serves(device)) return b;
  }
  return nullptr;
}

char* Executor::PrescaleBuffer(int64_t bytes) {
  if (bytes > prescaled_bytes_) {
    int64_t rounded = (bytes + 63) / 64 * 64;
    prescaled_.reset(static_cast<char*>(std::aligned_alloc(64, rounded)));
    prescaled_bytes_ = prescaled_ ? rounded : 0;
  }
  return prescaled_.get();
}

void Executor::Record(const std::vector<const Response*>& responses,
                      const char* phase, Clock::time_point start) {
  if (timeline_ == nullptr || !timeline_->enabled()) return;
  Clock::time_point end = Clock::now();
  for (const Response* r : responses) timeline_->Event(r->name, phase, start, end);
}

bool Executor::Pipelined(const Batch& batch) const {
  // Fused allreduces go through the pipeline's fusion buffers unless the
  // backend reduces them where they are (node shared memory). Lone tensors
  // keep the blocking allreduce, in place or straight into the output:
  // started together they were slower on one host (MPICH's shared-memory
  // Iallreduce) and no faster across emulated hosts (benchmarks/allreduce.py,
  // gradient step).
  const Response& head = *batch.responses.front();
  const Backend* backend = BackendFor(head.device);
  return batch.responses.size() > 1 && head.op == OpType::kAllreduce &&
         !head.is_error() && backend != nullptr &&
         !backend->AllreducesLayouts();
}

std::unique_ptr<FusedLayout> Executor::Layout(
    const std::vector<const Response*>& responses,
    const std::vector<TensorEntry*>& entries) const {
  std::vector<FusedTensor> tensors(responses.size());
  for (size_t i = 0; i < responses.size(); ++i) {
    FusedTensor& t = tensors[i];
    t.count = NumElements(responses[i]->shape);
    t.prescale = responses[i]->prescale;
    t.postscale = PostScale(*responses[i], size_);
    if (entries[i] != nullptr) {
      t.input = entries[i]->input;
      t.output = entries[i]->output;
    }
  }
  return std::make_unique<FusedLayout>(responses.front()->dtype,
                                       std::move(tensors));
}

void Executor::Run(const std::vector<Batch>& batches,
                   const BatchDoneFn& done) {
  // Layouts of pipelined batches live until their batch is done.
  std::vector<std::unique_ptr<FusedLayout>> layouts(batches.size());
  pipeline_.SetCallbacks(
      [&](size_t b, const Status& status) {
        std::vector<TensorResult> results(batches[b].responses.size());
        for (TensorResult& r : results) r.status = status;
        done(b, &results);
        layouts[b].reset();
      },
      [&](size_t b, const char* phase, Clock::time_point start) {
        Record(batches[b].responses, phase, start);
      });
  std::vector<TensorResult> results;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    if (Pipelined(batch)) {
      const Response& head = *batch.responses.front();
      layouts[b] = Layout(batch.responses, batch.entries);
      pipeline_.Start(b, layouts[b].get(), BackendOp(head.reduce_op),
                      BackendFor(head.device));
      continue;
    }
    pipeline_.Drain();
    RunOne(batch.responses, batch.entries, &results);
    done(b, &results);
  }
  pipeline_.Drain();
}

void Executor::RunOne(const std::vector<const Response*>& responses,
                      const std::vector<TensorEntry*>& entries,
                      std::vector<TensorResult>* results) {
  results->assign(responses.size(), TensorResult());
  const Response& head = *responses.front();
  if (head.is_error()) {
    for (TensorResult& r : *results) {
      r.status = Status(head.error_code, head.error);
    }
    return;
  }
  if (head.op == OpType::kJoin) {
    (*results)[0].last_joined_rank = head.root_rank;
    return;
  }
  Backend* backend = BackendFor(head.device);
  if (backend == nullptr) {
    for (TensorResult& r : *results) {
      r.status = Status::Unsupported(
          "no backend serves device " + std::to_string(head.device) +
          " (this build has the MPI backend for CPU buffers only)");
    }
    return;
  }
  Status s;
  auto start = Clock::now();
  switch (head.op) {
    case OpType::kAllreduce:
      s = Allreduce(responses, entries, backend);
      break;
    case OpType::kAllgather:
      s = Allgather(head, entries[0], backend);
      break;
    case OpType::kBroadcast:
      s = Broadcast(head, entries[0], backend);
      break;
    case OpType::kAlltoall:
      s = responses.size() == 1
              ? Alltoall(head, entries[0], backend, &(*results)[0])
              : AlltoallFused(responses, entries, backend, results);
      break;
    case OpType::kReducescatter:
      s = Reducescatter(head, entries[0], backend);
      break;
    case OpType::kBarrier:
      s = backend->Barrier();
      break;
    case OpType::kJoin:
    case OpType::kProcessSetAdd:     // performed by the runtime (runtime.h)
    case OpType::kProcessSetRemove:
      break;
  }
  if (head.op != OpType::kAllreduce) Record(responses, PhaseName(head.op), start);
  for (TensorResult& r : *results) r.status = s;
}

Status Executor::Allreduce(const std::vector<const Response*>& responses,
                           const std::vector<TensorEntry*>& entries,
                           Backend* backend) {
  const Response& head = *responses.front();
  const ReduceOp op = BackendOp(head.reduce_op);
  if (responses.size() == 1) {
    return AllreduceAlone(head, entries[0], op, backend, responses);
  }
  // Fused batches of other backends went through the pipeline (Run).
  HB_CHECK(backend->AllreducesLayouts(),
           "fused allreduce outside the pipeline on backend " << backend->name());
  const std::unique_ptr<FusedLayout> layout = Layout(responses, entries);
  return backend->AllreduceLayout(
      *layout, op, [&](const char* phase, Clock::time_point start) {
        Record(responses, phase, start);
      });
}

Status Executor::AllreduceAlone(const Response& r, TensorEntry* e,
                                ReduceOp op, Backend* backend,
                                const std::vector<const Response*>& responses) {
  // Straight from input to output: no copies unless a prescale needs one.
  const DataType dtype = r.dtype;
  const int64_t count = NumElements(r.shape);
  const void* in;
  void* out;
  if (e == nullptr) {
    zeros_.assign(std::max<int64_t>(count * DataTypeSize(dtype), 1), 0);
    in = out = zeros_.data();
  } else {
    in = e->input;
    out = e->output;
    if (r.prescale != 1.0) {
      ScaledCopy(out, in, count, dtype, r.prescale);
      in = out;
    }
  }
  auto start = Clock::now();
  Status s = backend->Allreduce(in, out, count, dtype, op);
  Record(responses, "ALLREDUCE", start);
  if (!s.ok()) return s;
  const double post = PostScale(r, size_);
  if (e != nullptr && post != 1.0) ScaledCopy(out, out, count, dtype, post);
  return Status::OK();
}

Status Executor::Allgather(const Response& r, TensorEntry* e,
                           Backend* backend) {
  const int64_t row = RowBytes(r);
  std::vector<int64_t> bytes(size_);
  int64_t rows = 0;
  for (int i = 0; i < size_; ++i) {
    bytes[i] = r.rank_dims[i] * row;
    rows += r.rank_dims[i];
  }
  Shape out_shape = RowShape(r.shape);
  out_shape.insert(out_shape.begin(), rows);
  void* out = AllocateOutput(e, out_shape, &scratch_, rows * row);
  if (out == nullptr && rows * row > 0) {
    return Status::Internal("output allocation failed for tensor '" + r.name +
                            "'");
  }
  const void* in = e ? e->input : nullptr;
  return backend->Allgatherv(in, out, bytes);
}

Status Executor::Broadcast(const Response& r, TensorEntry* e,
                           Backend* backend) {
  const int64_t bytes = NumElements(r.shape) * DataTypeSize(r.dtype);
  void* buffer;
  if (e == nullptr) {
    scratch_.resize(std::max<int64_t>(bytes, 1));
    buffer = scratch_.data();
  } else {
    buffer = e->output;
    if (rank_ == r.root_rank && e->input != e->output) {
      std::memcpy(e->output, e->input, bytes);
    }
  }
  return backend->Broadcast(buffer, bytes, r.root_rank);
}

Status Executor::Alltoall(const Response& r, TensorEntry* e, Backend* backend,
                          TensorResult* result) {
  const int64_t row = RowBytes(r);
  std::vector<int64_t> send(size_), recv(size_);
  int64_t rows = 0;
  result->received_splits.resize(size_);
  for (int peer = 0; peer < size_; ++peer) {
    send[peer] = r.rank_dims[static_cast<size_t>(rank_) * size_ + peer] * row;
    int64_t in_rows = r.rank_dims[static_cast<size_t>(peer) * size_ + rank_];
    recv[peer] = in_rows * row;
    result->received_splits[peer] = in_rows;
    rows += in_rows;
  }
  Shape out_shape = RowShape(r.shape);
  out_shape.insert(out_shape.begin(), rows);
  void* out = AllocateOutput(e, out_shape, &scratch_, rows * row);
  if (out == nullptr && rows * row > 0) {
    return Status::Internal("output allocation failed for tensor '" + r.name +
                            "'");
  }
  return backend->Alltoallv(e ? e->input : nullptr, send, out, recv);
}

Status Executor::AlltoallFused(const std::vector<const Response*>& responses,
                               const std::vector<TensorEntry*>& entries,
                               Backend* backend,
                               std::vector<TensorResult>* results) {
  // Layout of the one exchange: the segment for (or from) each peer is the
  // members' rows for that peer, in batch order. Member i's rows for peer p
  // start in its input at the sum of its segments for peers before p, and
  // land in its output at the sum of what it receives from peers before p.
  const size_t n = responses.size();
  std::vector<int64_t> send(size_, 0), recv(size_, 0);
  std::vector<std::vector<int64_t>> send_of(n, std::vector<int64_t>(size_));
  std::vector<std::vector<int64_t>> recv_of(n, std::vector<int64_t>(size_));
  std::vector<void*> outputs(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const Response& r = *responses[i];
    const int64_t row = RowBytes(r);
    TensorResult& result = (*results)[i];
    result.received_splits.resize(size_);
    int64_t rows = 0;
    for (int peer = 0; peer < size_; ++peer) {
      send_of[i][peer] =
          r.rank_dims[static_cast<size_t>(rank_) * size_ + peer] * row;
      const int64_t in_rows =
          r.rank_dims[static_cast<size_t>(peer) * size_ + rank_];
      recv_of[i][peer] = in_rows * row;
      result.received_splits[peer] = in_rows;
      rows += in_rows;
      send[peer] += send_of[i][peer];
      recv[peer] += recv_of[i][peer];
    }
    if (entries[i] != nullptr) {
      Shape out_shape = RowShape(r.shape);
      out_shape.insert(out_shape.begin(), rows);
      outputs[i] = AllocateOutput(entries[i], out_shape, nullptr, 0);
      if (outputs[i] == nullptr && rows * row > 0) {
        return Status::Internal("output allocation failed for tensor '" +
                                r.name + "'");
      }
    }
  }
  int64_t send_total = 0, recv_total = 0;
  for (int peer = 0; peer < size_; ++peer) {
    send_total += send[peer];
    recv_total += recv[peer];
  }
  alltoall_send_.resize(std::max<int64_t>(send_total, 1));
  alltoall_recv_.resize(std::max<int64_t>(recv_total, 1));
  std::vector<int64_t> in_offset(n, 0);
  char* packed = alltoall_send_.data();
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t bytes = send_of[i][peer];
      if (bytes > 0 && entries[i] != nullptr) {
        std::memcpy(packed, static_cast<const char*>(entries[i]->input) +
                                in_offset[i], bytes);
      }
      in_offset[i] += bytes;
      packed += bytes;
    }
  }
  Status s = backend->Alltoallv(alltoall_send_.data(), send,
                                alltoall_recv_.data(), recv);
  if (!s.ok()) return s;
  std::vector<int64_t> out_offset(n, 0);
  const char* unpacked = alltoall_recv_.data();
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t bytes = recv_of[i][peer];
      if (bytes > 0 && outputs[i] != nullptr) {
        std::memcpy(static_cast<char*>(outputs[i]) + out_offset[i], unpacked,
                    bytes);
      }
      out_offset[i] += bytes;
      unpacked += bytes;
    }
  }
  return Status::OK();
}

Status Executor::Reducescatter(const Response& r, TensorEntry* e,
                               Backend* backend) {
  const int64_t elem = DataTypeSize(r.dtype);
  const int64_t row_elems = NumElements(RowShape(r.shape));
  const int64_t n = r.shape[0];
  // Rank i gets n / size rows, plus one when i < n % size.
  auto rows_of = [&](int i) { return n / size_ + (i < n % size_ ? 1 : 0); };
  std::vector<int64_t> counts(size_);
  for (int i = 0; i < size_; ++i) counts[i] = rows_of(i) * row_elems;
  Shape out_shape = RowShape(r.shape);
  out_shape.insert(out_shape.begin(), rows_of(rank_));
  const int64_t total = n * row_elems;
  const void* in = e ? e->input : nullptr;
  if (e != nullptr && r.prescale != 1.0) {
    char* buffer = PrescaleBuffer(total * elem);
    ScaledCopy(buffer, in, total, r.dtype, r.prescale);
    in = buffer;
  }
  void* out = AllocateOutput(e, out_shape, &scratch_, counts[rank_] * elem);
  if (out == nullptr && counts[rank_] > 0) {
    return Status::Internal("output allocation failed for tensor '" + r.name +
                            "'");
  }
  Status s = backend->Reducescatter(in, out, counts, r.dtype,
                                    BackendOp(r.reduce_op));
  if (!s.ok()) return s;
  double post = PostScale(r, size_);
  if (e != nullptr && post != 1.0) {
    ScaledCopy(out, out, counts[rank_], r.dtype, post);
  }
  return Status::OK();
}

}  // namespace hbcore
