#include "output_pool.h"

#include <algorithm>
#include <utility>

#include "tensorflow/core/framework/allocation_description.pb.h"

namespace hbcore_tf {

// A TensorBuffer whose memory goes back to its pool when TF drops it.
class OutputPool::Buffer : public tensorflow::TensorBuffer {
 public:
  Buffer(std::shared_ptr<OutputPool> pool, Block block, size_t bytes)
      : tensorflow::TensorBuffer(block.get()),
        pool_(std::move(pool)),
        block_(std::move(block)),
        bytes_(bytes) {}
  ~Buffer() override { pool_->Release(std::move(block_), bytes_); }

  size_t size() const override { return bytes_; }
  tensorflow::TensorBuffer* root_buffer() override { return this; }
  void FillAllocationDescription(
      tensorflow::AllocationDescription* proto) const override {
    proto->set_requested_bytes(static_cast<int64_t>(bytes_));
    proto->set_allocated_bytes(static_cast<int64_t>(bytes_));
    proto->set_allocator_name("hbcore_output_pool");
  }

 private:
  std::shared_ptr<OutputPool> pool_;
  Block block_;
  size_t bytes_;
};

void OutputPool::Reserve(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_free_bytes_ = std::max(max_free_bytes_, 2 * bytes);
}

bool OutputPool::Allocate(tensorflow::DataType dtype,
                          const tensorflow::TensorShape& shape,
                          tensorflow::Tensor* out) {
  const size_t bytes = shape.num_elements() * tensorflow::DataTypeSize(dtype);
  Block block;
  {
    std::lock_guard<std::mutex> lock(mu_);
    block = free_.Take(bytes);
  }
  if (!block) {
    // At least TF's alignment for CPU tensors (64 bytes: Eigen's widest
    // vector loads); 2 MiB blocks and more on huge pages (c_api.h).
    block.reset(hb_host_malloc(bytes));
    if (!block) return false;
  }
  // TF's buffers are reference counted (core::RefCounted deletes itself on
  // the last Unref), so no owner object here. The tensor takes its own
  // reference; the buffer starts with one, ours.
  auto* buffer = new Buffer(shared_from_this(), std::move(block), bytes);
  *out = tensorflow::Tensor(dtype, shape, buffer);
  buffer->Unref();
  return true;
}

void OutputPool::Release(Block block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.Put(std::move(block), bytes, max_free_bytes_);
}

}  // namespace hbcore_tf
