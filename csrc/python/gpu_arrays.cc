// DLPack inputs and GPU outputs of the numpy API (see gpu_arrays.h).
#include "gpu_arrays.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common.h"
#include "hbcore/c_api.h"

namespace hbcore_py {
namespace {

// "(2, 3)", "(4,)", "()" as numpy prints shapes.
std::string TupleString(const int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + (n == 1 ? ",)" : ")");
}

const char* TypeCodeName(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLOpaqueHandle: return "opaque handle";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    default: return "unknown";
  }
}

std::string DtypeString(const DLDataType& t) {
  return "code " + std::to_string(t.code) + " (" + TypeCodeName(t.code) +
         "), " + std::to_string(t.bits) + " bits, " + std::to_string(t.lanes) +
         (t.lanes == 1 ? " lane" : " lanes");
}

// The hb_dtype of a DLPack dtype with one lane, or -1.
int HbDtype(const DLDataType& t) {
  switch (t.code) {
    case kDLInt:
      switch (t.bits) {
        case 8: return HB_INT8;
        case 16: return HB_INT16;
        case 32: return HB_INT32;
        case 64: return HB_INT64;
      }
      break;
    case kDLUInt:
      switch (t.bits) {
        case 8: return HB_UINT8;
        case 16: return HB_UINT16;
      }
      break;
    case kDLFloat:
      switch (t.bits) {
        case 16: return HB_FLOAT16;
        case 32: return HB_FLOAT32;
        case 64: return HB_FLOAT64;
      }
      break;
    case kDLBfloat:
      if (t.bits == 16) return HB_BFLOAT16;
      break;
    case kDLBool:
      if (t.bits == 8) return HB_BOOL;
      break;
  }
  return -1;
}

// The DLPack dtype of an hb_dtype.
DLDataType DlDtype(int code) {
  switch (code) {
    case HB_UINT8: return {kDLUInt, 8, 1};
    case HB_INT8: return {kDLInt, 8, 1};
    case HB_UINT16: return {kDLUInt, 16, 1};
    case HB_INT16: return {kDLInt, 16, 1};
    case HB_INT32: return {kDLInt, 32, 1};
    case HB_INT64: return {kDLInt, 64, 1};
    case HB_FLOAT16: return {kDLFloat, 16, 1};
    case HB_FLOAT32: return {kDLFloat, 32, 1};
    case HB_FLOAT64: return {kDLFloat, 64, 1};
    case HB_BOOL: return {kDLBool, 8, 1};
    case HB_BFLOAT16: return {kDLBfloat, 16, 1};
    default: return {kDLOpaqueHandle, 0, 1};
  }
}

// __cuda_array_interface__ type strings (little-endian hosts).
const char* TypeString(int code) {
  switch (code) {
    case HB_UINT8: return "|u1";
    case HB_INT8: return "|i1";
    case HB_UINT16: return "<u2";
    case HB_INT16: return "<i2";
    case HB_INT32: return "<i4";
    case HB_INT64: return "<i8";
    case HB_FLOAT16: return "<f2";
    case HB_FLOAT32: return "<f4";
    case HB_FLOAT64: return "<f8";
    case HB_BOOL: return "|b1";
    default: return "<V2";  // bfloat16: no standard type string
  }
}

constexpr const char* kSupported =
    "int8, int16, int32, int64, uint8, uint16, float16, float32, float64, "
    "bfloat16 and bool";

[[noreturn]] void Invalid(const std::string& what, const std::string& why) {
  RaiseFor(HB_ERR_INVALID_ARGUMENT, what + ": " + why);
}

[[noreturn]] void RaiseBufferError(const std::string& message) {
  PyErr_SetString(PyExc_BufferError, message.c_str());
  throw py::error_already_set();
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// What an exported capsule points to: the managed tensor, the arrays it
// refers to, and a reference to the GpuArray that owns the memory.
struct ExportContext {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  PyObject* owner = nullptr;
};

// The exported tensor's deleter. Consumers may call it without the GIL
// (the DLPack convention), so it takes the GIL to drop its reference.
void ExportDeleter(DLManagedTensor* self) {
  auto* ctx = static_cast<ExportContext*>(self->manager_ctx);
  if (Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_XDECREF(ctx->owner);
    PyGILState_Release(gil);
  }
  delete ctx;
}

// Frees an exported tensor no consumer took (the capsule kept its name).
void ExportCapsuleDestructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleLegacy)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(
      PyCapsule_GetPointer(capsule, kCapsuleLegacy));
  if (managed != nullptr && managed->deleter != nullptr) {
    managed->deleter(managed);
  }
  PyErr_Restore(type, value, traceback);
}

// GpuArray.__dlpack__: a legacy "dltensor" capsule (every consumer reads
// it). `stream` needs no wait: the memory is complete once the operation
// that produced it finished (the core synchronized its streams).
py::object ExportDlpack(py::object self, py::object stream,
                        py::object max_version, py::object dl_device,
                        py::object copy) {
  (void)stream;
  (void)max_version;
  GpuArray& a = self.cast<GpuArray&>();
  if (!dl_device.is_none()) {
    py::tuple d = py::tuple(dl_device);
    if (d.size() != 2 || d[0].cast<int>() != kDLCUDA ||
        d[1].cast<int>() != a.device()) {
      RaiseBufferError("hbcore.GpuArray lives on CUDA device " +
                       std::to_string(a.device()) + " and cannot be exported "
                       "to dl_device=" + py::repr(dl_device).cast<std::string>());
    }
  }
  if (!copy.is_none() && PyObject_IsTrue(copy.ptr()) == 1) {
    RaiseBufferError("hbcore.GpuArray cannot copy in __dlpack__(copy=True)");
  }
  auto ctx = std::make_unique<ExportContext>();
  ctx->shape = a.shape();
  ctx->strides.assign(a.shape().size(), 1);
  for (size_t i = a.shape().size(); i-- > 1;) {
    ctx->strides[i - 1] = ctx->strides[i] * a.shape()[i];
  }
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = a.ptr();
  t.device = {kDLCUDA, a.device()};
  t.ndim = static_cast<int32_t>(ctx->shape.size());
  t.dtype = DlDtype(a.dtype());
  t.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  t.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &ExportDeleter;
  PyObject* capsule =
      PyCapsule_New(&ctx->managed, kCapsuleLegacy, &ExportCapsuleDestructor);
  if (capsule == nullptr) throw py::error_already_set();
  ctx->owner = self.inc_ref().ptr();
  ctx.release();
  return py::reinterpret_steal<py::object>(capsule);
}

py::dict CudaArrayInterface(const GpuArray& a) {
  py::dict d;
  d["shape"] = py::tuple(py::cast(a.shape()));
  d["typestr"] = TypeString(a.dtype());
  d["data"] = py::make_tuple(
      py::int_(reinterpret_cast<uintptr_t>(a.ptr())), false);
  d["strides"] = py::none();
  d["version"] = 3;
  return d;
}

}  // namespace

// --- DlpackInput ------------------------------------------------------------

std::unique_ptr<DlpackInput> DlpackInput::Take(PyObject* capsule,
                                               bool writable,
                                               const std::string& what) {
  if (!PyCapsule_CheckExact(capsule)) {
    throw py::type_error(what + ": __dlpack__() returned " +
                         Py_TYPE(capsule)->tp_name + ", not a PyCapsule");
  }
  const char* raw_name = PyCapsule_GetName(capsule);
  if (raw_name == nullptr && PyErr_Occurred()) throw py::error_already_set();
  const std::string name = raw_name == nullptr ? "" : raw_name;
  DLManagedTensor* legacy = nullptr;
  DLManagedTensorVersioned* versioned = nullptr;
  const DLTensor* t = nullptr;
  if (name == kCapsuleLegacy) {
    legacy = static_cast<DLManagedTensor*>(
        PyCapsule_GetPointer(capsule, kCapsuleLegacy));
    if (legacy == nullptr) throw py::error_already_set();
    t = &legacy->dl_tensor;
  } else if (name == kCapsuleVersioned) {
    versioned = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule, kCapsuleVersioned));
    if (versioned == nullptr) throw py::error_already_set();
    if (versioned->version.major != kDLPackMajorVersion) {
      Invalid(what, "the DLPack tensor has version " +
                        std::to_string(versioned->version.major) + "." +
                        std::to_string(versioned->version.minor) +
                        "; hbcore reads DLPack 1.x");
    }
    if (writable && (versioned->flags & kDLPackFlagReadOnly) != 0) {
      Invalid(what, "works in place and needs writable device memory, but "
                    "the producer exported the tensor read-only");
    }
    if (writable && (versioned->flags & kDLPackFlagIsCopied) != 0) {
      Invalid(what, "works in place, but the producer exported a copy of "
                    "the tensor (the result would not reach it)");
    }
    t = &versioned->dl_tensor;
  } else {
    Invalid(what, "__dlpack__() returned a capsule named '" + name +
                      "'; expected 'dltensor' or 'dltensor_versioned' (a "
                      "capsule can be consumed only once)");
  }

  const int32_t type = t->device.device_type;
  if (type != kDLCUDA && type != kDLCUDAManaged) {
    Invalid(what, "the GPU path takes CUDA memory (DLPack device type " +
                      std::to_string(kDLCUDA) + " or " +
                      std::to_string(kDLCUDAManaged) + "), got device type " +
                      std::to_string(type));
  }
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) {
    Invalid(what, "malformed DLPack tensor (ndim " + std::to_string(t->ndim) +
                      ", no shape)");
  }
  if (t->dtype.lanes != 1) {
    Invalid(what, "unsupported DLPack dtype (" + DtypeString(t->dtype) +
                      "): vector types (lanes != 1) are not supported");
  }
  const int dtype = HbDtype(t->dtype);
  if (dtype < 0) {
    Invalid(what, "unsupported DLPack dtype (" + DtypeString(t->dtype) +
                      "); supported: " + kSupported);
  }
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  for (int64_t d : shape) {
    if (d < 0) {
      Invalid(what, "negative dimension in DLPack shape " +
                        TupleString(shape.data(), t->ndim));
    }
  }
  // Compact row-major: each stride is the product of the later dimensions.
  // Dimensions of size 1 may carry any stride (frameworks differ there),
  // and an empty tensor has no layout to check.
  if (t->strides != nullptr && NumElements(shape) > 0) {
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && t->strides[i] != expected) {
        Invalid(what, "hbcore needs a C-contiguous GPU tensor; got shape " +
                          TupleString(shape.data(), t->ndim) +
                          " with strides " +
                          TupleString(t->strides, t->ndim) +
                          " (in elements); make it contiguous first");
      }
      expected *= shape[i];
    }
  }

  std::unique_ptr<DlpackInput> in(new DlpackInput());
  in->data_ = static_cast<char*>(t->data) + t->byte_offset;
  in->device_ = t->device.device_id;
  in->device_type_ = type;
  in->dtype_ = dtype;
  in->shape_ = std::move(shape);
  // Consumed: from here the producer's capsule destructor leaves the
  // tensor alone and this object calls its deleter.
  if (PyCapsule_SetName(capsule, legacy != nullptr ? kCapsuleLegacyUsed
                                                   : kCapsuleVersionedUsed) !=
      0) {
    throw py::error_already_set();
  }
  in->legacy_ = legacy;
  in->versioned_ = versioned;
  return in;
}

DlpackInput::~DlpackInput() {
  if (legacy_ != nullptr && legacy_->deleter != nullptr) {
    legacy_->deleter(legacy_);
  }
  if (versioned_ != nullptr && versioned_->deleter != nullptr) {
    versioned_->deleter(versioned_);
  }
}

size_t DlpackInput::nbytes() const {
  return static_cast<size_t>(NumElements(shape_)) * ItemSize(dtype_);
}

// --- GpuArray ---------------------------------------------------------------

GpuArray::~GpuArray() { hb_gpu_free(device_, ptr_); }

int64_t GpuArray::size() const { return NumElements(shape_); }

size_t GpuArray::nbytes() const {
  return static_cast<size_t>(size()) * ItemSize(dtype_);
}

py::object WrapGpuArray(int device, void* ptr, std::vector<int64_t> shape,
                        int dtype) {
  // Owned from here: should the cast fail, the memory is freed.
  std::unique_ptr<GpuArray> array(
      new GpuArray(device, ptr, std::move(shape), dtype));
  return py::cast(std::move(array));
}

py::object NewGpuArray(int device, const std::vector<int64_t>& shape,
                       int dtype) {
  for (int64_t d : shape) {
    if (d < 0) {
      RaiseFor(HB_ERR_INVALID_ARGUMENT,
               "negative dimension in shape " +
                   TupleString(shape.data(), static_cast<int>(shape.size())));
    }
  }
  // Never 0 bytes: a null pointer would read as a failed allocation.
  const size_t bytes =
      std::max<size_t>(1, static_cast<size_t>(NumElements(shape)) *
                              ItemSize(dtype));
  void* ptr = nullptr;
  char err[1024] = {0};
  int code;
  {
    py::gil_scoped_release release;
    code = hb_gpu_malloc(device, bytes, &ptr, err, sizeof(err));
  }
  if (code != HB_OK) RaiseFor(code, err);
  return WrapGpuArray(device, ptr, shape, dtype);
}

DlpackInput* AsDlpackInput(PyObject* o) {
  py::handle h(o);
  if (!py::isinstance<DlpackInput>(h)) return nullptr;
  return &h.cast<DlpackInput&>();
}

GpuArray* AsGpuArray(PyObject* o) {
  py::handle h(o);
  if (!py::isinstance<GpuArray>(h)) return nullptr;
  return &h.cast<GpuArray&>();
}

void RegisterGpuArrays(py::module_& m) {
  py::class_<DlpackInput>(
      m, "DlpackInput",
      "A GPU tensor taken from another framework through DLPack, owned "
      "until released (its producer's deleter runs then). Made by "
      "dlpack_input(); read by submit().")
      .def_property_readonly("device", &DlpackInput::device)
      .def_property_readonly("device_type", &DlpackInput::device_type)
      .def_property_readonly("dtype", &DlpackInput::dtype,
                             "the hb_dtype code")
      .def_property_readonly(
          "shape",
          [](const DlpackInput& in) { return py::tuple(py::cast(in.shape())); })
      .def_property_readonly("nbytes", &DlpackInput::nbytes)
      .def_property_readonly("versioned", &DlpackInput::versioned,
                             "True for a DLPack 1.x (versioned) capsule");

  py::class_<GpuArray>(
      m, "GpuArray",
      "Device memory holding a GPU collective's result, allocated by the "
      "runtime on the input's device.\n\n"
      "Hand it to any framework through DLPack (torch.from_dlpack, "
      "cupy.from_dlpack, jax.numpy.from_dlpack, "
      "tf.experimental.dlpack.from_dlpack(a.__dlpack__())) or "
      "__cuda_array_interface__ (CuPy, Numba); the memory is freed once "
      "the array and every export of it are gone. Its contents are "
      "complete when the operation returned it: consumers need no stream "
      "synchronization.")
      .def_property_readonly(
          "shape",
          [](const GpuArray& a) { return py::tuple(py::cast(a.shape())); })
      .def_property_readonly(
          "dtype",
          [](const GpuArray& a) {
            py::object dtype = Dtypes().DtypeOf(a.dtype());
            if (dtype.is_none()) {
              throw py::type_error(
                  "this GpuArray's dtype (bfloat16) has no numpy dtype "
                  "without the ml_dtypes package");
            }
            return dtype;
          },
          "the numpy dtype")
      .def_property_readonly("device", &GpuArray::device, "the CUDA device")
      .def_property_readonly(
          "ndim", [](const GpuArray& a) { return a.shape().size(); })
      .def_property_readonly("size", &GpuArray::size)
      .def_property_readonly("nbytes", &GpuArray::nbytes)
      .def_property_readonly(
          "ptr",
          [](const GpuArray& a) {
            return reinterpret_cast<uintptr_t>(a.ptr());
          },
          "the device address")
      .def("__dlpack__", &ExportDlpack, py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           "A DLPack capsule ('dltensor') viewing this memory; it keeps the "
           "array alive until the consumer releases it.")
      .def("__dlpack_device__",
           [](const GpuArray& a) { return py::make_tuple(kDLCUDA, a.device()); })
      .def_property_readonly("__cuda_array_interface__", &CudaArrayInterface)
      .def("__repr__", [](const GpuArray& a) {
        py::object dtype = Dtypes().DtypeOf(a.dtype());
        const std::string name = dtype.is_none()
                                     ? std::string("bfloat16")
                                     : py::str(dtype).cast<std::string>();
        return "GpuArray(shape=" +
               TupleString(a.shape().data(),
                           static_cast<int>(a.shape().size())) +
               ", dtype=" + name + ", device=" + std::to_string(a.device()) +
               ")";
      });

  m.def(
      "dlpack_input",
      [](py::object capsule, bool writable, const std::string& what) {
        return DlpackInput::Take(capsule.ptr(), writable, what);
      },
      py::arg("capsule"), py::arg("writable") = false,
      py::arg("what") = "hbcore",
      "dlpack_input(capsule, writable=False, what='hbcore') -> DlpackInput: "
      "validates and consumes a __dlpack__() capsule of CUDA memory; "
      "InvalidArgumentError (message prefixed with `what`) when it cannot "
      "be used, the capsule then left unconsumed");
  m.def("gpu_empty", &NewGpuArray, py::arg("device"), py::arg("shape"),
        py::arg("dtype"),
        "gpu_empty(device, shape, dtype) -> GpuArray: uninitialised device "
        "memory (hb_gpu_malloc) for an hb_dtype code");
  m.def(
      "probe_gpu",
      [](const std::string& nccl, const std::string& cuda_runtime,
         bool count_devices) {
        std::vector<char> buf(8192, '\0');
        int ok;
        {
          py::gil_scoped_release release;
          ok = hb_probe_gpu(nccl.c_str(), cuda_runtime.c_str(),
                            count_devices ? 1 : 0, buf.data(), buf.size());
        }
        return py::make_tuple(ok != 0, std::string(buf.data()));
      },
      py::arg("nccl_library") = "", py::arg("cuda_runtime_library") = "",
      py::arg("count_devices") = false,
      "probe_gpu(nccl_library='', cuda_runtime_library='', "
      "count_devices=False) -> (ok, text): hb_probe_gpu ('' = the "
      "environment variable, else the default soname)");
}

}  // namespace hbcore_py
