// Where an hbcore op's tensors live, for the requests it submits: the CPU,
// or (when TensorFlow runs the op's GPU kernel) the GPU ordinal and
// TensorFlow's compute stream for the op. The core orders its own streams
// after the work queued on that stream at submission (hb_request::stream),
// so the inputs TF produced there are ready before NCCL reads them, and it
// calls done only once the outputs are written.
#ifndef HBCORE_TF_GPU_PLACEMENT_H_
#define HBCORE_TF_GPU_PLACEMENT_H_

#include "hbcore/c_api.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hbcore_tf {

struct Placement {
  int device = HB_DEVICE_CPU;
  void* stream = nullptr;  // cudaStream_t of TF's compute stream
  bool gpu() const { return device != HB_DEVICE_CPU; }
};

// The placement of the kernel running in `ctx`; CPU kernels (and
// TensorFlow builds without CUDA, which never run GPU kernels) get the CPU.
Placement PlacementOf(tensorflow::OpKernelContext* ctx);

}  // namespace hbcore_tf

#endif  // HBCORE_TF_GPU_PLACEMENT_H_
