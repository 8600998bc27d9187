// GPU buffers of the numpy API: DLPack inputs taken from other frameworks
// (DlpackInput) and device memory the runtime allocated for outputs
// (GpuArray, exported again through DLPack and __cuda_array_interface__).
//
// Ownership rules that must stay true:
//  - A DlpackInput owns the producer's DLManagedTensor from the moment its
//    capsule is renamed "used_dltensor[_versioned]" and calls the tensor's
//    deleter exactly once, when the Python object is released (under the
//    GIL). A capsule that fails validation is left unconsumed, so its
//    producer's capsule destructor frees it.
//  - A GpuArray owns its device pointer and returns it with hb_gpu_free
//    exactly once, when the last reference is gone: every exported DLPack
//    capsule holds a reference to the GpuArray until its consumer calls
//    the deleter.
//  - Both are released on Python threads only (hbcore._core parks the
//    objects of a dropped, unfinished operation until it is done), never
//    on the core's background thread.
#ifndef HBCORE_PYTHON_GPU_ARRAYS_H_
#define HBCORE_PYTHON_GPU_ARRAYS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlpack_abi.h"

namespace hbcore_py {

namespace py = pybind11;

class DlpackInput {
 public:
  // Validates the DLPack tensor in `capsule` for the GPU path of operation
  // `what` and takes it over. With `writable` (in-place operations) a
  // tensor flagged read-only or copied is refused.
  //
  // Raises InvalidArgumentError naming the problem: not C-contiguous
  // (shape and strides), an unsupported dtype (code, bits, lanes), a
  // device that is not CUDA memory, an unknown capsule or DLPack version.
  static std::unique_ptr<DlpackInput> Take(PyObject* capsule, bool writable,
                                           const std::string& what);
  ~DlpackInput();
  DlpackInput(const DlpackInput&) = delete;
  DlpackInput& operator=(const DlpackInput&) = delete;

  void* data() const { return data_; }  // data + byte_offset
  int device() const { return device_; }
  int device_type() const { return device_type_; }
  int dtype() const { return dtype_; }  // hb_dtype
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t nbytes() const;
  bool versioned() const { return versioned_ != nullptr; }

 private:
  DlpackInput() = default;
  DLManagedTensor* legacy_ = nullptr;
  DLManagedTensorVersioned* versioned_ = nullptr;
  void* data_ = nullptr;
  int device_ = 0;
  int device_type_ = 0;
  int dtype_ = 0;
  std::vector<int64_t> shape_;
};

class GpuArray {
 public:
  // Takes ownership of `ptr`, device memory from hb_gpu_malloc.
  GpuArray(int device, void* ptr, std::vector<int64_t> shape, int dtype)
      : device_(device), ptr_(ptr), shape_(std::move(shape)), dtype_(dtype) {}
  ~GpuArray();
  GpuArray(const GpuArray&) = delete;
  GpuArray& operator=(const GpuArray&) = delete;

  int device() const { return device_; }
  void* ptr() const { return ptr_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int dtype() const { return dtype_; }  // hb_dtype
  int64_t size() const;
  size_t nbytes() const;

 private:
  int device_;
  void* ptr_;
  std::vector<int64_t> shape_;
  int dtype_;
};

// A new GpuArray of `shape` and hb_dtype `dtype` on `device` (hb_gpu_malloc,
// with the GIL released). Raises UnsupportedError without GPU support,
// NotInitializedError before init.
py::object NewGpuArray(int device, const std::vector<int64_t>& shape,
                       int dtype);
// Wraps memory the caller allocated with hb_gpu_malloc (taken over).
py::object WrapGpuArray(int device, void* ptr, std::vector<int64_t> shape,
                        int dtype);

// nullptr when `o` is not of the type.
DlpackInput* AsDlpackInput(PyObject* o);
GpuArray* AsGpuArray(PyObject* o);

// Defines DlpackInput, GpuArray, dlpack_input, gpu_empty and probe_gpu.
void RegisterGpuArrays(py::module_& m);

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_GPU_ARRAYS_H_
