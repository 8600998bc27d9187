#include "gpu_placement.h"

#include "tensorflow/core/framework/types.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace hbcore_tf {

Placement PlacementOf(tensorflow::OpKernelContext* ctx) {
  Placement p;
  if (ctx->device()->device_type() != tensorflow::DEVICE_GPU) return p;
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr || context->stream() == nullptr) return p;
  stream_executor::Stream* stream = context->stream();
  p.device = stream->parent()->device_ordinal();
  p.stream = stream->platform_specific_handle().stream;
  return p;
}

}  // namespace hbcore_tf
