// The DLPack ABI (https://github.com/dmlc/dlpack, include/dlpack/dlpack.h,
// v1.0), declared here because hbcore does not vendor the header. Only what
// the numpy API's GPU path reads and writes; the layouts and numbers are
// fixed by the standard and must stay exactly as they are.
#ifndef HBCORE_PYTHON_DLPACK_ABI_H_
#define HBCORE_PYTHON_DLPACK_ABI_H_

#include <stdint.h>

namespace hbcore_py {

// DLDeviceType values hbcore looks at.
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLCUDAHost = 3;
constexpr int32_t kDLCUDAManaged = 13;

// DLDataTypeCode values.
constexpr uint8_t kDLInt = 0;
constexpr uint8_t kDLUInt = 1;
constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLOpaqueHandle = 3;
constexpr uint8_t kDLBfloat = 4;
constexpr uint8_t kDLComplex = 5;
constexpr uint8_t kDLBool = 6;

// DLManagedTensorVersioned::flags bits.
constexpr uint64_t kDLPackFlagReadOnly = 1ULL << 0;
constexpr uint64_t kDLPackFlagIsCopied = 1ULL << 1;

// The DLPack major version whose versioned struct layout this file has.
constexpr uint32_t kDLPackMajorVersion = 1;

// PyCapsule names of the Python exchange protocol.
constexpr const char* kCapsuleLegacy = "dltensor";
constexpr const char* kCapsuleLegacyUsed = "used_dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
constexpr const char* kCapsuleVersionedUsed = "used_dltensor_versioned";

struct DLDevice {
  int32_t device_type;  // DLDeviceType (a C enum: int-sized)
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;  // DLDataTypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL: compact row-major
  uint64_t byte_offset;
};

// The legacy (pre-1.0) managed tensor, in capsules named "dltensor".
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

// The DLPack 1.x managed tensor, in capsules named "dltensor_versioned".
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

}  // namespace hbcore_py

#endif  // HBCORE_PYTHON_DLPACK_ABI_H_
