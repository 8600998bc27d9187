#include "backends/allreduce_pipeline.h"

#include <algorithm>

namespace hbcore {
namespace {

using Clock = std::chrono::steady_clock;

// Packing copies this much between two progress calls.
constexpr int64_t kPackBlockBytes = 256 * 1024;

}  // namespace

void AllreducePipeline::Start(size_t batch, const FusedLayout* layout,
                              ReduceOp op, Backend* backend) {
  const int64_t elem = layout->element_size();
  const int64_t piece = std::max<int64_t>(1, backend->PieceBytes() / elem);
  Memory* memory = backend->memory();
  const int64_t total = layout->total();
  for (int64_t begin = 0; begin < total || begin == 0; begin += piece) {
    Flight f;
    f.batch = batch;
    f.layout = layout;
    f.backend = backend;
    f.begin = begin;
    f.end = std::min(total, begin + piece);
    f.last = f.end >= total;
    f.buffer = next_buffer_;
    next_buffer_ = (next_buffer_ + 1) % kBuffers;
    // The buffer is free once the piece that used it last has completed.
    while (std::any_of(flights_.begin(), flights_.end(),
                       [&](const Flight& g) { return g.buffer == f.buffer; })) {
      CompleteOldest();
    }
    const int64_t bytes = (f.end - f.begin) * elem;
    // A buffer holds a whole piece (the backend may make it bigger once,
    // e.g. NCCL's fixed HB_FUSION_THRESHOLD-sized device buffers).
    char* buffer = static_cast<char*>(
        buffers_[f.buffer].Get(memory, std::min(total * elem, piece * elem)));
    buffer_data_[f.buffer] = buffer;
    if (buffer == nullptr) {
      f.status = Status::Internal("cannot allocate a " +
                                  std::string(backend->name()) +
                                  " fusion buffer of " +
                                  std::to_string(bytes) + " bytes");
    } else {
      f.start = Clock::now();
      const int64_t count = f.end - f.begin;
      if (backend->StartsFromLayout(count, layout->dtype(), op)) {
        // The backend packs and unpacks what it needs itself.
        f.unpacked = true;
        f.status = backend->StartAllreduceFromLayout(*layout, f.begin, count,
                                                     buffer, op, &f.op);
      } else {
        f.status = Pack(*layout, f.begin, f.end, buffer, memory);
        if (f.begin == 0 && f.last) {
          phase_(batch, "MEMCPY_IN_FUSION_BUFFER", f.start);
        }
        if (f.status.ok()) {
          f.status = backend->StartAllreduce(buffer, buffer, count,
                                             layout->dtype(), op, &f.op);
        }
      }
    }
    flights_.push_back(std::move(f));
    if (total == 0) break;
  }
}

Status AllreducePipeline::Pack(const FusedLayout& layout, int64_t begin,
                               int64_t end, char* dst, Memory* memory) {
  const int64_t elem = layout.element_size();
  const int64_t block = std::max<int64_t>(1, kPackBlockBytes / elem);
  for (int64_t at = begin; at < end; at += block) {
    const int64_t n = std::min(block, end - at);
    Status s = layout.Gather(at, n, dst + (at - begin) * elem, memory);
    if (!s.ok()) return s;
    if (!flights_.empty() && flights_.front().op) flights_.front().op->Test();
  }
  return Status::OK();
}

void AllreducePipeline::CompleteOldest() {
  Flight f = std::move(flights_.front());
  flights_.pop_front();
  if (f.status.ok() && f.op) f.status = f.op->Wait();
  if (f.status.ok()) {
    if (f.begin == 0) batch_start_ = f.start;
    const auto unpack = Clock::now();
    Memory* memory = f.backend->memory();
    if (!f.unpacked) {
      f.status = f.layout->Scatter(f.begin, f.end - f.begin,
                                   buffer_data_[f.buffer], memory);
    }
    // The batch's outputs are final once the unpacking completed.
    if (f.status.ok() && f.last) f.status = memory->Synchronize();
    if (f.last) phase_(f.batch, "ALLREDUCE", batch_start_);
    if (f.begin == 0 && f.last && !f.unpacked) {
      phase_(f.batch, "MEMCPY_OUT_FUSION_BUFFER", unpack);
    }
  }
  if (batch_status_.ok()) batch_status_ = f.status;
  if (f.last) {
    Status status = batch_status_;
    batch_status_ = Status::OK();
    done_(f.batch, status);
  }
}

void AllreducePipeline::Drain() {
  while (!flights_.empty()) CompleteOldest();
}

}  // namespace hbcore
