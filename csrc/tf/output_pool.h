// Recycled output buffers for the collective ops.
//
// A collective op node produces outputs of the same sizes every step. TF's
// CPU allocator hands large blocks back to the system when they are freed
// (glibc returns them with munmap or trims the heap), so each step's
// outputs were fresh pages: page faults and zeroing cost about as much as
// copying the results in. An op kernel keeps its own pool instead: a
// buffer freed by TF (its last tensor dropped, on any thread) returns to
// the pool of the kernel that made it, and the next invocation reuses it.
//
// Lifetime: every pooled buffer holds a reference to its pool, so a pool
// outlives its kernel as long as tensors from it are alive.
// Bound: the pool keeps at most twice the bytes of the largest invocation
// it served. The free list is hbcore/free_blocks.h: a freed buffer that
// does not fit evicts the least recently freed ones first, and goes back
// to the system only when it alone exceeds the bound.
#ifndef HBCORE_TF_OUTPUT_POOL_H_
#define HBCORE_TF_OUTPUT_POOL_H_

#include <cstddef>
#include <memory>
#include <mutex>

#include "hbcore/c_api.h"
#include "hbcore/free_blocks.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace hbcore_tf {

class OutputPool : public std::enable_shared_from_this<OutputPool> {
 public:
  // Outputs smaller than this come from TF's allocator: malloc serves them
  // from its free lists without page faults.
  static constexpr size_t kMinPooledBytes = 64 * 1024;

  // Declares that one invocation needs `bytes` of pooled outputs in all
  // (raises the pool's bound when needed).
  void Reserve(size_t bytes);

  // A tensor of `dtype` and `shape` (at least kMinPooledBytes) backed by a
  // recycled buffer, or a new one. Returns false when memory ran out.
  bool Allocate(tensorflow::DataType dtype, const tensorflow::TensorShape& shape,
                tensorflow::Tensor* out);

 private:
  using Block = hbcore::FreeBlocks::Block;
  class Buffer;

  void Release(Block block, size_t bytes);

  std::mutex mu_;
  hbcore::FreeBlocks free_;
  size_t max_free_bytes_ = 0;
};

}  // namespace hbcore_tf

#endif  // HBCORE_TF_OUTPUT_POOL_H_
