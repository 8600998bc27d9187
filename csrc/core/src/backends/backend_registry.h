// Which backend serves a device: one registry per process set's executor,
// filled when the set is created (init for the global set): the MPI
// backend for CPU buffers, and the NCCL backend for GPU buffers when NCCL
// and the CUDA runtime were loaded. A new backend is one new file plus one
// Register call in the runtime (Runtime::CreateExecutor).
#ifndef HBCORE_BACKENDS_BACKEND_REGISTRY_H_
#define HBCORE_BACKENDS_BACKEND_REGISTRY_H_

#include <string>
#include <vector>

#include "backends/backend.h"

namespace hbcore {

class BackendRegistry {
 public:
  // `backend` must outlive the registry. Earlier registrations win.
  void Register(Backend* backend) { backends_.push_back(backend); }
  // Why GPU requests are not served (when no backend serves them), for the
  // error a GPU request gets at submission.
  void SetGpuMissing(std::string why) { gpu_missing_ = std::move(why); }

  // The backend serving `device`, or null.
  Backend* For(int device) const {
    for (Backend* b : backends_) {
      if (b->Serves(device)) return b;
    }
    return nullptr;
  }
  // Why nothing serves `device` (call when For returned null).
  std::string WhyNot(int device) const {
    if (device >= 0 && !gpu_missing_.empty()) return gpu_missing_;
    return "no backend serves device " + std::to_string(device);
  }

 private:
  std::vector<Backend*> backends_;
  std::string gpu_missing_;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_BACKEND_REGISTRY_H_
