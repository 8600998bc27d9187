// NCCL and the CUDA runtime, loaded with dlopen (never linked), so hbcore
// builds and runs without CUDA. One GpuLibraries object holds both
// libraries' handles and entry points for as long as it lives; the runtime
// owns one (created at init when GPU support is found), and hb_probe_gpu
// makes a short-lived one.
//
// Search order for each library: the configured path (HB_NCCL_LIBRARY,
// HB_CUDA_RUNTIME_LIBRARY, or the paths the Python front end found in the
// nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 wheels), else the default
// soname through the dynamic linker (LD_LIBRARY_PATH, the system).
#ifndef HBCORE_GPU_GPU_LIBRARIES_H_
#define HBCORE_GPU_GPU_LIBRARIES_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "gpu/gpu_abi.h"

namespace hbcore {

// The entry points, one member per line of gpu_abi.h's lists.
#define HB_DECLARE_ENTRY_POINT(field, symbol) symbol##_fn field = nullptr;
struct CudaApi {
  HB_CUDA_ENTRY_POINTS(HB_DECLARE_ENTRY_POINT)
};

struct NcclApi {
  HB_NCCL_ENTRY_POINTS(HB_DECLARE_ENTRY_POINT)
};
#undef HB_DECLARE_ENTRY_POINT

class GpuLibraries {
 public:
  // Loads both libraries (empty path: the default soname). Fails with
  // HB_ERR_UNSUPPORTED naming the library, the path tried and dlerror(),
  // or a missing entry point.
  static Status Load(const std::string& nccl_path,
                     const std::string& cuda_runtime_path,
                     std::unique_ptr<GpuLibraries>* out);
  ~GpuLibraries();
  GpuLibraries(const GpuLibraries&) = delete;
  GpuLibraries& operator=(const GpuLibraries&) = delete;

  const CudaApi& cuda() const { return cuda_; }
  const NcclApi& nccl() const { return nccl_; }
  // Where each library was loaded from (dladdr of an entry point).
  const std::string& nccl_path() const { return nccl_path_; }
  const std::string& cuda_runtime_path() const { return cuda_path_; }
  // "2.23.4" from ncclGetVersion.
  std::string NcclVersion() const;
  // "12.4" from cudaRuntimeGetVersion.
  std::string CudaRuntimeVersion() const;
  // Status for a failed CUDA / NCCL call: `what` plus the library's text.
  Status CudaError(const std::string& what, cudaError_t e) const;
  Status NcclError(const std::string& what, ncclResult_t r) const;

 private:
  GpuLibraries() = default;
  struct Handle {
    void* dl = nullptr;
    ~Handle();
  };
  Handle cuda_dl_;
  Handle nccl_dl_;
  CudaApi cuda_;
  NcclApi nccl_;
  std::string nccl_path_;
  std::string cuda_path_;
};

// Makes `device` the calling thread's current CUDA device for its scope
// and restores the previous one: hbcore's calls from a front end's thread
// (or at shutdown) leave that thread's device as they found it.
class DeviceGuard {
 public:
  DeviceGuard(const GpuLibraries& gpu, int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  // Whether switching succeeded (the error: see status()).
  const Status& status() const { return status_; }

 private:
  const CudaApi& cuda_;
  int previous_ = -1;
  bool switched_ = false;
  Status status_;
};

}  // namespace hbcore

#endif  // HBCORE_GPU_GPU_LIBRARIES_H_
