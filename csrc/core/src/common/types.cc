#include "common/types.h"

#include <sstream>

namespace hbcore {

bool IsValidDataType(int v) { return v >= HB_UINT8 && v <= HB_BFLOAT16; }
bool IsValidOpType(int v) { return v >= HB_ALLREDUCE && v <= HB_JOIN; }
bool IsInternalOpType(int v) {
  return v == static_cast<int>(OpType::kProcessSetAdd) ||
         v == static_cast<int>(OpType::kProcessSetRemove);
}
bool IsValidReduceOp(int v) {
  return v >= HB_REDUCE_AVERAGE && v <= HB_REDUCE_PRODUCT;
}

int64_t DataTypeSize(DataType dt) {
  switch (dt) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

bool IsFloatingPoint(DataType dt) {
  return dt == DataType::kFloat16 || dt == DataType::kBFloat16 ||
         dt == DataType::kFloat32 || dt == DataType::kFloat64;
}

const char* DataTypeName(DataType dt) {
  switch (dt) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

const char* OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce: return "allreduce";
    case OpType::kAllgather: return "allgather";
    case OpType::kBroadcast: return "broadcast";
    case OpType::kAlltoall: return "alltoall";
    case OpType::kReducescatter: return "reducescatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kJoin: return "join";
    case OpType::kProcessSetAdd: return "add_process_set";
    case OpType::kProcessSetRemove: return "remove_process_set";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage: return "Average";
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kAdasum: return "Adasum";
    case ReduceOp::kMin: return "Min";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kProduct: return "Product";
  }
  return "unknown";
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out << ", ";
    out << shape[i];
  }
  out << "]";
  return out.str();
}

}  // namespace hbcore
