#include "allreduce_pipeline.h"

#include <algorithm>

namespace hbcore {
namespace {

using Clock = std::chrono::steady_clock;

// Packing copies this much between two progress calls.
constexpr int64_t kPackBlockBytes = 256 * 1024;

}  // namespace

char* AllreducePipeline::Buffer(int index, int64_t bytes) {
  if (bytes > buffer_bytes_[index]) {
    const int64_t rounded = (bytes + 63) / 64 * 64;
    buffers_[index].reset(static_cast<char*>(std::aligned_alloc(64, rounded)));
    buffer_bytes_[index] = buffers_[index] ? rounded : 0;
  }
  return buffers_[index].get();
}

void AllreducePipeline::Start(size_t batch, const FusedLayout* layout,
                              ReduceOp op, Backend* backend) {
  const int64_t elem = layout->element_size();
  const int64_t piece = std::max<int64_t>(1, kPieceBytes / elem);
  const int64_t total = layout->total();
  for (int64_t begin = 0; begin < total || begin == 0; begin += piece) {
    Flight f;
    f.batch = batch;
    f.layout = layout;
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
    char* buffer = Buffer(f.buffer, bytes);
    if (buffer == nullptr && bytes > 0) {
      f.status = Status::Internal("cannot allocate a fusion buffer of " +
                                  std::to_string(bytes) + " bytes");
    } else {
      f.start = Clock::now();
      Pack(*layout, f.begin, f.end, buffer);
      if (f.begin == 0 && f.last) {
        phase_(batch, "MEMCPY_IN_FUSION_BUFFER", f.start);
      }
      f.status = backend->StartAllreduce(buffer, buffer, f.end - f.begin,
                                         layout->dtype(), op, &f.op);
    }
    flights_.push_back(std::move(f));
    if (total == 0) break;
  }
}

void AllreducePipeline::Pack(const FusedLayout& layout, int64_t begin,
                             int64_t end, char* dst) {
  const int64_t elem = layout.element_size();
  const int64_t block = std::max<int64_t>(1, kPackBlockBytes / elem);
  for (int64_t at = begin; at < end; at += block) {
    const int64_t n = std::min(block, end - at);
    layout.Gather(at, n, dst + (at - begin) * elem);
    if (!flights_.empty() && flights_.front().op) flights_.front().op->Test();
  }
}

void AllreducePipeline::CompleteOldest() {
  Flight f = std::move(flights_.front());
  flights_.pop_front();
  if (f.status.ok() && f.op) f.status = f.op->Wait();
  if (f.status.ok()) {
    if (f.begin == 0) batch_start_ = f.start;
    const auto unpack = Clock::now();
    f.layout->Scatter(f.begin, f.end - f.begin, buffers_[f.buffer].get());
    if (f.last) phase_(f.batch, "ALLREDUCE", batch_start_);
    if (f.begin == 0 && f.last) {
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
