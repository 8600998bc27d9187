#include "runtime/executor.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "negotiation/fusion.h"

namespace hbcore {
namespace {

Shape RowShape(const Shape& shape) {
  return Shape(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
}

int64_t RowBytes(const Response& r) {
  return NumElements(RowShape(r.shape)) * DataTypeSize(r.dtype);
}

ReduceOp BackendOp(ReduceOp op, const Backend* backend) {
  return op == ReduceOp::kAverage &&
                 !(backend != nullptr && backend->ReducesAverage())
             ? ReduceOp::kSum
             : op;
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

// Output buffer from the front end's allocator, or a discard buffer (in the
// backend's memory) for a rank without an entry.
void* AllocateOutput(TensorEntry* e, const Shape& shape,
                     ScratchBuffer* discard, Memory* memory, int64_t bytes) {
  if (e == nullptr) return discard->Get(memory, bytes);
  if (e->alloc == nullptr) return e->output;
  return e->alloc(e->user, static_cast<int>(shape.size()), shape.data());
}

Status AllocationFailed(const Response& r) {
  return Status::Internal("output allocation failed for tensor '" + r.name +
                          "'");
}

}  // namespace

Executor::Executor(int rank, int size, const BackendRegistry* backends,
                   Timeline* timeline)
    : rank_(rank), size_(size), backends_(backends), timeline_(timeline) {}

double Executor::PostScale(const Response& r, const Backend* backend) const {
  return r.reduce_op == ReduceOp::kAverage &&
                 !(backend != nullptr && backend->ReducesAverage())
             ? r.postscale / size_
             : r.postscale;
}

Status Executor::Begin(Backend* backend, const Response& head,
                       const std::vector<TensorEntry*>& entries) {
  // This rank's device for the batch, from its own tensors. A rank with
  // none of them (joined) cannot use the response's ordinal (the first
  // rank's GPU): for a GPU batch it passes -2 and the backend picks.
  int device = head.device == HB_DEVICE_CPU ? HB_DEVICE_CPU : -2;
  std::vector<void*> ready;
  bool have_device = false;
  for (const TensorEntry* e : entries) {
    if (e == nullptr) continue;
    if (!have_device) device = e->request.device;
    have_device = true;
    if (e->ready_event != nullptr) ready.push_back(e->ready_event);
  }
  return backend->BeginBatch(device, ready);
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
  // never do (see fusion.h for how they run): started together as
  // Iallreduces they were slower on one host (MPICH's shared-memory
  // Iallreduce) and no faster across emulated hosts (benchmarks/allreduce.py,
  // gradient step); on hbcore's ring a 4 MiB tensor took 955-1042 us
  // straight and 1131-1172 us as a pipelined batch of one (2 x 1 emulated
  // hosts, alternating within one job, 2026-11-27).
  const Response& head = *batch.responses.front();
  const Backend* backend = backends_->For(head.device);
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
    t.postscale = PostScale(*responses[i], backends_->For(responses[i]->device));
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
      Backend* backend = backends_->For(head.device);
      Status begun = Begin(backend, head, batch.entries);
      if (!begun.ok()) {
        pipeline_.Drain();
        results.assign(batch.responses.size(), TensorResult());
        for (TensorResult& r : results) r.status = begun;
        done(b, &results);
        continue;
      }
      layouts[b] = Layout(batch.responses, batch.entries);
      pipeline_.Start(b, layouts[b].get(),
                      BackendOp(head.reduce_op, backend), backend);
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
  Backend* backend = backends_->For(head.device);
  if (backend == nullptr) {
    for (TensorResult& r : *results) {
      r.status = Status::Unsupported(backends_->WhyNot(head.device));
    }
    return;
  }
  Status s = Begin(backend, head, entries);
  if (!s.ok()) {
    for (TensorResult& r : *results) r.status = s;
    return;
  }
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
  // Outputs are final once the backend's queued work completed.
  Status synced = backend->memory()->Synchronize();
  if (s.ok()) s = synced;
  if (head.op != OpType::kAllreduce) Record(responses, PhaseName(head.op), start);
  for (TensorResult& r : *results) r.status = s;
}

Status Executor::Allreduce(const std::vector<const Response*>& responses,
                           const std::vector<TensorEntry*>& entries,
                           Backend* backend) {
  const Response& head = *responses.front();
  const ReduceOp op = BackendOp(head.reduce_op, backend);
  if (responses.size() == 1 &&
      !(backend->AllreducesLayouts() && ResponseBytes(head) >= kLoneLayoutBytes)) {
    return AllreduceAlone(head, entries[0], op, backend, responses);
  }
  // Fused batches of other backends went through the pipeline (Run); a
  // lone tensor reduced where it is is a batch of one (see fusion.h).
  HB_CHECK(backend->AllreducesLayouts(),
           "fused allreduce outside the pipeline on backend " << backend->name());
  const std::unique_ptr<FusedLayout> layout = Layout(responses, entries);
  return backend->AllreduceLayout(
      *layout, op, [&](const char* phase, Clock::time_point start) {
        Record(responses, phase, start);
      });
}

TensorResult Executor::FinishCarried(const Response& r, TensorEntry* e,
                                     const void* reduced) {
  TensorResult result;
  const auto start = Clock::now();
  Backend* backend = backends_->For(r.device);
  const int64_t count = NumElements(r.shape);
  void* out = AllocateOutput(e, r.shape, &discard_, backend->memory(),
                             count * DataTypeSize(r.dtype));
  if (out == nullptr && count > 0) {
    result.status = AllocationFailed(r);
    return result;
  }
  // The payload was summed by the control plane, never averaged.
  const double post = r.reduce_op == ReduceOp::kAverage
                          ? r.postscale / size_
                          : r.postscale;
  if (count > 0) {
    result.status =
        backend->memory()->ScaledCopy(out, reduced, count, r.dtype, post);
  }
  // The timeline marks the tensors the fast path carried (the collective
  // itself is inside their NEGOTIATE span).
  Record({&r}, "FAST_PATH_ALLREDUCE", start);
  return result;
}

Status Executor::AllreduceAlone(const Response& r, TensorEntry* e,
                                ReduceOp op, Backend* backend,
                                const std::vector<const Response*>& responses) {
  // Straight from input to output: no copies unless a prescale needs one.
  const DataType dtype = r.dtype;
  const int64_t count = NumElements(r.shape);
  const int64_t bytes = count * DataTypeSize(dtype);
  Memory* memory = backend->memory();
  const void* in;
  void* out;
  Status s;
  if (e == nullptr) {
    out = zeros_.Get(memory, bytes);
    if (out == nullptr) return AllocationFailed(r);
    s = memory->Zero(out, bytes);
    in = out;
  } else {
    in = e->input;
    out = e->output;
    if (r.prescale != 1.0) {
      s = memory->ScaledCopy(out, in, count, dtype, r.prescale);
      in = out;
    }
  }
  if (!s.ok()) return s;
  auto start = Clock::now();
  s = backend->Allreduce(in, out, count, dtype, op);
  Record(responses, "ALLREDUCE", start);
  if (!s.ok()) return s;
  const double post = PostScale(r, backend);
  if (e != nullptr && post != 1.0) {
    return memory->ScaledCopy(out, out, count, dtype, post);
  }
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
  void* out = AllocateOutput(e, out_shape, &discard_, backend->memory(),
                             rows * row);
  if (out == nullptr && rows * row > 0) return AllocationFailed(r);
  const void* in = e ? e->input : nullptr;
  return backend->Allgatherv(in, out, bytes);
}

Status Executor::Broadcast(const Response& r, TensorEntry* e,
                           Backend* backend) {
  const int64_t bytes = NumElements(r.shape) * DataTypeSize(r.dtype);
  void* buffer;
  if (e == nullptr) {
    buffer = discard_.Get(backend->memory(), bytes);
    if (buffer == nullptr) return AllocationFailed(r);
  } else {
    buffer = e->output;
    if (rank_ == r.root_rank && e->input != e->output) {
      Status s = backend->memory()->Copy(e->output, e->input, bytes);
      if (!s.ok()) return s;
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
  void* out = AllocateOutput(e, out_shape, &discard_, backend->memory(),
                             rows * row);
  if (out == nullptr && rows * row > 0) return AllocationFailed(r);
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
      outputs[i] = AllocateOutput(entries[i], out_shape, &discard_,
                                  backend->memory(), 0);
      if (outputs[i] == nullptr && rows * row > 0) return AllocationFailed(r);
    }
  }
  int64_t send_total = 0, recv_total = 0;
  for (int peer = 0; peer < size_; ++peer) {
    send_total += send[peer];
    recv_total += recv[peer];
  }
  Memory* memory = backend->memory();
  char* send_buffer =
      static_cast<char*>(alltoall_send_.Get(memory, send_total));
  char* recv_buffer =
      static_cast<char*>(alltoall_recv_.Get(memory, recv_total));
  if (send_buffer == nullptr || recv_buffer == nullptr) {
    return AllocationFailed(*responses.front());
  }
  Status s;
  std::vector<int64_t> in_offset(n, 0);
  char* packed = send_buffer;
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t bytes = send_of[i][peer];
      if (bytes > 0 && entries[i] != nullptr && s.ok()) {
        s = memory->Copy(packed, static_cast<const char*>(entries[i]->input) +
                                     in_offset[i], bytes);
      }
      in_offset[i] += bytes;
      packed += bytes;
    }
  }
  if (!s.ok()) return s;
  s = backend->Alltoallv(send_buffer, send, recv_buffer, recv);
  if (!s.ok()) return s;
  std::vector<int64_t> out_offset(n, 0);
  const char* unpacked = recv_buffer;
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t bytes = recv_of[i][peer];
      if (bytes > 0 && outputs[i] != nullptr && s.ok()) {
        s = memory->Copy(static_cast<char*>(outputs[i]) + out_offset[i],
                         unpacked, bytes);
      }
      out_offset[i] += bytes;
      unpacked += bytes;
    }
  }
  return s;
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
  Memory* memory = backend->memory();
  const void* in = e ? e->input : nullptr;
  if (e == nullptr) {
    // A rank without the tensor contributes zeros.
    void* zeros = zeros_.Get(memory, total * elem);
    if (zeros == nullptr) return AllocationFailed(r);
    Status s = memory->Zero(zeros, total * elem);
    if (!s.ok()) return s;
    in = zeros;
  } else if (r.prescale != 1.0) {
    void* buffer = prescaled_.Get(memory, total * elem);
    if (buffer == nullptr) return AllocationFailed(r);
    Status s = memory->ScaledCopy(buffer, in, total, r.dtype, r.prescale);
    if (!s.ok()) return s;
    in = buffer;
  }
  void* out = AllocateOutput(e, out_shape, &discard_, memory,
                             counts[rank_] * elem);
  if (out == nullptr && counts[rank_] > 0) return AllocationFailed(r);
  Status s = backend->Reducescatter(in, out, counts, r.dtype,
                                    BackendOp(r.reduce_op, backend));
  if (!s.ok()) return s;
  double post = PostScale(r, backend);
  if (e != nullptr && post != 1.0) {
    return memory->ScaledCopy(out, out, counts[rank_], r.dtype, post);
  }
  return Status::OK();
}

}  // namespace hbcore
