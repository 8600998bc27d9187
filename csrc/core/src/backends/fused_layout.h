// The tensors of one fused allreduce, laid end to end in a virtual buffer of
// total() elements: "fused coordinates". The executor describes a batch this
// way; a backend packs (Gather) and unpacks (Scatter) any element range of
// it, applying each tensor's scale factors, so that it may reduce pieces of
// the batch where they are instead of through one fusion buffer.
//
// Gather and Scatter use the same ScaledCopy as every other path, so a value
// is scaled identically whichever range or backend it travels through: the
// results of a tensor do not depend on how its batch was fused or split.
#ifndef HBCORE_BACKENDS_FUSED_LAYOUT_H_
#define HBCORE_BACKENDS_FUSED_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "backends/memory.h"
#include "common/status.h"
#include "common/types.h"

namespace hbcore {

struct FusedTensor {
  const void* input = nullptr;  // null: this rank contributes zeros
  void* output = nullptr;       // null: this rank discards the result
  int64_t count = 0;            // elements
  double prescale = 1.0;        // applied by Gather
  double postscale = 1.0;       // applied by Scatter
};

class FusedLayout {
 public:
  FusedLayout(DataType dtype, std::vector<FusedTensor> tensors);

  DataType dtype() const { return dtype_; }
  int64_t element_size() const { return element_size_; }
  int64_t total() const { return offsets_.back(); }
  int64_t bytes() const { return total() * element_size_; }
  size_t size() const { return tensors_.size(); }
  const FusedTensor& tensor(size_t i) const { return tensors_[i]; }

  // dst[0, n) = prescaled inputs at fused elements [begin, begin + n), in
  // host memory (the MPI shared-memory path).
  void Gather(int64_t begin, int64_t n, void* dst) const;
  // The same through `memory` (the buffers live there), and Scatter's twin.
  Status Gather(int64_t begin, int64_t n, void* dst, Memory* memory) const;
  Status Scatter(int64_t begin, int64_t n, const void* src,
                 Memory* memory) const;
  // The prescaled inputs at fused elements [begin, begin + n): a pointer
  // into the tensor when they need no copy (one tensor, present, prescale
  // 1), else gathered into `scratch` (n elements) and `scratch`.
  const void* InputView(int64_t begin, int64_t n, void* scratch) const;
  // Fused outputs [begin, begin + n) = postscaled src[0, n).
  void Scatter(int64_t begin, int64_t n, const void* src) const;
  // dst[0, n) = (prescaled inputs at fused elements [begin, begin + n)) op
  // other[0, n), in host memory: what Gather into dst and then
  // Reduce(dst, dst, other) give, reading each tensor's input where it is
  // instead of through dst first (a missing input counts as zeros, as in
  // Gather). With `scatter`, also what Scatter(begin, n, dst) then gives,
  // tensor by tensor while each span is in cache. `dst` and `other` do not
  // overlap the tensors. Returns false where Reduce does not support `op`
  // on the dtype.
  bool ReduceInto(int64_t begin, int64_t n, void* dst, const void* other,
                  ReduceOp op, bool scatter = false) const;

 private:
  // Calls fn(tensor, offset in tensor, offset in the range, count) for each
  // tensor's span of the fused range [begin, begin + n), in order.
  template <typename Fn>
  void ForEachSpan(int64_t begin, int64_t n, Fn fn) const;

  DataType dtype_;
  int64_t element_size_;
  std::vector<FusedTensor> tensors_;
  // offsets_[i]: first fused element of tensor i; offsets_.back(): total.
  std::vector<int64_t> offsets_;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_FUSED_LAYOUT_H_
