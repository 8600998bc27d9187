#include "backends/fused_layout.h"

#include <algorithm>
#include <cstring>

#include "backends/reduce_kernels.h"
#include "backends/scaling.h"

namespace hbcore {

FusedLayout::FusedLayout(DataType dtype, std::vector<FusedTensor> tensors)
    : dtype_(dtype), element_size_(DataTypeSize(dtype)),
      tensors_(std::move(tensors)) {
  offsets_.reserve(tensors_.size() + 1);
  int64_t offset = 0;
  for (const FusedTensor& t : tensors_) {
    offsets_.push_back(offset);
    offset += t.count;
  }
  offsets_.push_back(offset);
}

template <typename Fn>
void FusedLayout::ForEachSpan(int64_t begin, int64_t n, Fn fn) const {
  if (n <= 0) return;
  // The last tensor that starts at or before `begin`.
  size_t i = static_cast<size_t>(
      std::upper_bound(offsets_.begin(), offsets_.end() - 1, begin) -
      offsets_.begin() - 1);
  int64_t done = 0;
  for (; done < n && i < tensors_.size(); ++i) {
    const int64_t at = begin + done - offsets_[i];
    const int64_t m = std::min(tensors_[i].count - at, n - done);
    if (m > 0) fn(tensors_[i], at, done, m);
    done += std::max<int64_t>(m, 0);
  }
}

void FusedLayout::Gather(int64_t begin, int64_t n, void* dst) const {
  char* out = static_cast<char*>(dst);
  ForEachSpan(begin, n, [&](const FusedTensor& t, int64_t at, int64_t to,
                            int64_t m) {
    char* piece = out + to * element_size_;
    if (t.input == nullptr) {
      std::memset(piece, 0, m * element_size_);
    } else {
      ScaledCopy(piece, static_cast<const char*>(t.input) + at * element_size_,
                 m, dtype_, t.prescale);
    }
  });
}

const void* FusedLayout::InputView(int64_t begin, int64_t n,
                                   void* scratch) const {
  if (n > 0) {
    // The tensor holding `begin`, as in ForEachSpan.
    const size_t i = static_cast<size_t>(
        std::upper_bound(offsets_.begin(), offsets_.end() - 1, begin) -
        offsets_.begin() - 1);
    const FusedTensor& t = tensors_[i];
    const int64_t at = begin - offsets_[i];
    if (at + n <= t.count && t.input != nullptr && t.prescale == 1.0) {
      return static_cast<const char*>(t.input) + at * element_size_;
    }
  }
  Gather(begin, n, scratch);
  return scratch;
}

void FusedLayout::Scatter(int64_t begin, int64_t n, const void* src) const {
  const char* in = static_cast<const char*>(src);
  ForEachSpan(begin, n, [&](const FusedTensor& t, int64_t at, int64_t from,
                            int64_t m) {
    if (t.output == nullptr) return;
    ScaledCopy(static_cast<char*>(t.output) + at * element_size_,
               in + from * element_size_, m, dtype_, t.postscale);
  });
}

bool FusedLayout::ReduceInto(int64_t begin, int64_t n, void* dst,
                             const void* other, ReduceOp op,
                             bool scatter) const {
  char* out = static_cast<char*>(dst);
  const char* b = static_cast<const char*>(other);
  bool ok = true;
  ForEachSpan(begin, n, [&](const FusedTensor& t, int64_t at, int64_t to,
                            int64_t m) {
    char* piece = out + to * element_size_;
    const char* theirs = b + to * element_size_;
    // This rank's contribution: in the tensor, or written out first (zeros,
    // or scaled).
    const char* mine = piece;
    if (t.input == nullptr) {
      std::memset(piece, 0, m * element_size_);
    } else if (t.prescale != 1.0) {
      ScaledCopy(piece, static_cast<const char*>(t.input) + at * element_size_,
                 m, dtype_, t.prescale);
    } else {
      mine = static_cast<const char*>(t.input) + at * element_size_;
    }
    ok = Reduce(piece, mine, theirs, m, dtype_, op) && ok;
    if (scatter && t.output != nullptr) {
      ScaledCopy(static_cast<char*>(t.output) + at * element_size_, piece, m,
                 dtype_, t.postscale);
    }
  });
  return ok;
}

Status FusedLayout::Gather(int64_t begin, int64_t n, void* dst,
                           Memory* memory) const {
  char* out = static_cast<char*>(dst);
  Status status;
  ForEachSpan(begin, n, [&](const FusedTensor& t, int64_t at, int64_t to,
                            int64_t m) {
    if (!status.ok()) return;
    char* piece = out + to * element_size_;
    status = t.input == nullptr
                 ? memory->Zero(piece, m * element_size_)
                 : memory->ScaledCopy(
                       piece,
                       static_cast<const char*>(t.input) + at * element_size_,
                       m, dtype_, t.prescale);
  });
  return status;
}

Status FusedLayout::Scatter(int64_t begin, int64_t n, const void* src,
                            Memory* memory) const {
  const char* in = static_cast<const char*>(src);
  Status status;
  ForEachSpan(begin, n, [&](const FusedTensor& t, int64_t at, int64_t from,
                            int64_t m) {
    if (!status.ok() || t.output == nullptr) return;
    status = memory->ScaledCopy(static_cast<char*>(t.output) + at * element_size_,
                                in + from * element_size_, m, dtype_,
                                t.postscale);
  });
  return status;
}

}  // namespace hbcore
