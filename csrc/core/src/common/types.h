// Core value types shared by every component: data types, operations,
// reduce operations, and their names for messages.
#ifndef HBCORE_COMMON_TYPES_H_
#define HBCORE_COMMON_TYPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hbcore/c_api.h"

namespace hbcore {

enum class DataType : int32_t {
  kUInt8 = HB_UINT8,
  kInt8 = HB_INT8,
  kUInt16 = HB_UINT16,
  kInt16 = HB_INT16,
  kInt32 = HB_INT32,
  kInt64 = HB_INT64,
  kFloat16 = HB_FLOAT16,
  kFloat32 = HB_FLOAT32,
  kFloat64 = HB_FLOAT64,
  kBool = HB_BOOL,
  kBFloat16 = HB_BFLOAT16,
};

enum class OpType : int32_t {
  kAllreduce = HB_ALLREDUCE,
  kAllgather = HB_ALLGATHER,
  kBroadcast = HB_BROADCAST,
  kAlltoall = HB_ALLTOALL,
  kReducescatter = HB_REDUCESCATTER,
  kBarrier = HB_BARRIER,
  kJoin = HB_JOIN,
  // Internal operations, negotiated on the global set like a collective but
  // performed by the runtime itself; front ends cannot submit them
  // (IsValidOpType is false), hb_add_process_set / hb_remove_process_set do.
  kProcessSetAdd = 100,
  kProcessSetRemove = 101,
};

enum class ReduceOp : int32_t {
  kAverage = HB_REDUCE_AVERAGE,
  kSum = HB_REDUCE_SUM,
  kAdasum = HB_REDUCE_ADASUM,
  kMin = HB_REDUCE_MIN,
  kMax = HB_REDUCE_MAX,
  kProduct = HB_REDUCE_PRODUCT,
};

bool IsValidDataType(int v);
bool IsValidOpType(int v);       // the ops a front end may submit
bool IsInternalOpType(int v);    // kProcessSetAdd, kProcessSetRemove
bool IsValidReduceOp(int v);

// Bytes per element.
int64_t DataTypeSize(DataType dt);
bool IsFloatingPoint(DataType dt);
const char* DataTypeName(DataType dt);
const char* OpTypeName(OpType op);
const char* ReduceOpName(ReduceOp op);

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);

}  // namespace hbcore

#endif  // HBCORE_COMMON_TYPES_H_
