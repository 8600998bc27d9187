#include "gpu/gpu_libraries.h"

#include <dlfcn.h>

#include "hbcore/c_api.h"

namespace hbcore {
namespace {

Status Open(const std::string& path, const char* soname, const char* what,
            const char* knob, void** dl) {
  const std::string name = path.empty() ? soname : path;
  // RTLD_LOCAL: the symbols stay out of the global namespace, so a
  // framework's own copy of NCCL in the process is not disturbed.
  *dl = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (*dl != nullptr) return Status::OK();
  const char* why = dlerror();
  return Status::Unsupported(
      std::string("cannot load the ") + what + " library '" + name + "' (" +
      (why ? why : "unknown error") + "); install hbcore's GPU extra (pip "
      "install 'hbcore[gpu]') or set " + knob + " to its path");
}

template <typename Fn>
Status Find(void* dl, const char* symbol, const std::string& lib, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(dl, symbol));
  if (*fn != nullptr) return Status::OK();
  return Status::Unsupported("the library " + lib + " has no entry point " +
                             symbol + " (too old?)");
}

std::string PathOf(void* symbol, const std::string& fallback) {
  Dl_info info;
  if (symbol != nullptr && dladdr(symbol, &info) != 0 &&
      info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return fallback;
}

}  // namespace

GpuLibraries::Handle::~Handle() {
  if (dl != nullptr) dlclose(dl);
}

Status GpuLibraries::Load(const std::string& nccl_path,
                          const std::string& cuda_runtime_path,
                          std::unique_ptr<GpuLibraries>* out) {
  std::unique_ptr<GpuLibraries> g(new GpuLibraries());
  Status s = Open(cuda_runtime_path, "libcudart.so.12", "CUDA runtime",
                  "HB_CUDA_RUNTIME_LIBRARY", &g->cuda_dl_.dl);
  if (!s.ok()) return s;
  s = Open(nccl_path, "libnccl.so.2", "NCCL", "HB_NCCL_LIBRARY",
           &g->nccl_dl_.dl);
  if (!s.ok()) return s;
  const std::string cuda_name =
      cuda_runtime_path.empty() ? "libcudart.so.12" : cuda_runtime_path;
  const std::string nccl_name =
      nccl_path.empty() ? "libnccl.so.2" : nccl_path;
  void* c = g->cuda_dl_.dl;
  CudaApi& a = g->cuda_;
#define HB_FIND_CUDA(field, symbol) Find(c, #symbol, cuda_name, &a.field),
  for (Status f : {HB_CUDA_ENTRY_POINTS(HB_FIND_CUDA)}) {
    if (!f.ok()) return f;
  }
#undef HB_FIND_CUDA
  void* n = g->nccl_dl_.dl;
  NcclApi& b = g->nccl_;
#define HB_FIND_NCCL(field, symbol) Find(n, #symbol, nccl_name, &b.field),
  for (Status f : {HB_NCCL_ENTRY_POINTS(HB_FIND_NCCL)}) {
    if (!f.ok()) return f;
  }
#undef HB_FIND_NCCL
  g->cuda_path_ = PathOf(reinterpret_cast<void*>(a.Malloc), cuda_name);
  g->nccl_path_ = PathOf(reinterpret_cast<void*>(b.AllReduce), nccl_name);
  *out = std::move(g);
  return Status::OK();
}

GpuLibraries::~GpuLibraries() = default;

std::string GpuLibraries::NcclVersion() const {
  int v = 0;
  if (nccl_.GetVersion(&v) != kNcclSuccess) return "unknown";
  // Since NCCL 2.9 the code is major * 10000 + minor * 100 + patch.
  if (v >= 10000) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
           "." + std::to_string(v % 100);
  }
  return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." +
         std::to_string(v % 100);
}

std::string GpuLibraries::CudaRuntimeVersion() const {
  int v = 0;
  if (cuda_.RuntimeGetVersion(&v) != kCudaSuccess) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

Status GpuLibraries::CudaError(const std::string& what, cudaError_t e) const {
  const char* text = cuda_.GetErrorString ? cuda_.GetErrorString(e) : nullptr;
  return Status::Internal(what + " failed: CUDA error " + std::to_string(e) +
                          " (" + (text ? text : "?") + ")");
}

Status GpuLibraries::NcclError(const std::string& what,
                               ncclResult_t r) const {
  const char* text = nccl_.GetErrorString ? nccl_.GetErrorString(r) : nullptr;
  return Status::Internal(what + " failed: NCCL error " + std::to_string(r) +
                          " (" + (text ? text : "?") + ")");
}

DeviceGuard::DeviceGuard(const GpuLibraries& gpu, int device)
    : cuda_(gpu.cuda()) {
  cudaError_t e = cuda_.GetDevice(&previous_);
  if (e != kCudaSuccess) {
    status_ = gpu.CudaError("cudaGetDevice", e);
    return;
  }
  if (previous_ == device) return;
  e = cuda_.SetDevice(device);
  if (e != kCudaSuccess) {
    status_ = gpu.CudaError("cudaSetDevice(" + std::to_string(device) + ")",
                            e);
    return;
  }
  switched_ = true;
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cuda_.SetDevice(previous_);
}

}  // namespace hbcore
