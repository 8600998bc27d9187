#include "backends/reduce_kernels.h"

#include <algorithm>
#include <type_traits>

#include "backends/half.h"

namespace hbcore {
namespace {

// Integer sums and products wrap, as MPI's do, computed in an unsigned
// type at least as wide as unsigned int (no signed overflow, no promotion
// to a signed int).
template <typename T>
using Wrapping = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<T>>;

struct Sum {
  template <typename T> static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wrapping<T>>(a) +
                            static_cast<Wrapping<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct Min {
  template <typename T> static T Apply(T a, T b) { return std::min(a, b); }
};
struct Max {
  template <typename T> static T Apply(T a, T b) { return std::max(a, b); }
};
struct Product {
  template <typename T> static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wrapping<T>>(a) *
                            static_cast<Wrapping<T>>(b));
    } else {
      return a * b;
    }
  }
};

// Plain element loops: -O3 vectorises them. `out` may be `a` (the compiler
// checks for that overlap at run time), never a partial overlap.
template <typename T, typename Op>
void Combine(void* out, const void* a, const void* b, int64_t count) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* __restrict y = static_cast<const T*>(b);
  for (int64_t i = 0; i < count; ++i) o[i] = static_cast<T>(Op::Apply(x[i], y[i]));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void CombineHalf(void* out, const void* a, const void* b, int64_t count) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* __restrict y = static_cast<const uint16_t*>(b);
  for (int64_t i = 0; i < count; ++i) {
    o[i] = FromFloat(Op::Apply(ToFloat(x[i]), ToFloat(y[i])));
  }
}

// bool bytes are 0 or 1: or = max, and = min.
void CombineBool(void* out, const void* a, const void* b, int64_t count,
                 bool any) {
  if (any) {
    Combine<uint8_t, Max>(out, a, b, count);
  } else {
    Combine<uint8_t, Min>(out, a, b, count);
  }
}

template <typename Op>
bool Dispatch(void* out, const void* a, const void* b, int64_t count,
              DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: Combine<uint8_t, Op>(out, a, b, count); return true;
    case DataType::kInt8: Combine<int8_t, Op>(out, a, b, count); return true;
    case DataType::kUInt16: Combine<uint16_t, Op>(out, a, b, count); return true;
    case DataType::kInt16: Combine<int16_t, Op>(out, a, b, count); return true;
    case DataType::kInt32: Combine<int32_t, Op>(out, a, b, count); return true;
    case DataType::kInt64: Combine<int64_t, Op>(out, a, b, count); return true;
    case DataType::kFloat32: Combine<float, Op>(out, a, b, count); return true;
    case DataType::kFloat64: Combine<double, Op>(out, a, b, count); return true;
    case DataType::kFloat16:
      CombineHalf<Float16ToFloat, FloatToFloat16, Op>(out, a, b, count);
      return true;
    case DataType::kBFloat16:
      CombineHalf<BFloat16ToFloat, FloatToBFloat16, Op>(out, a, b, count);
      return true;
    case DataType::kBool:
      return false;  // handled by the caller
  }
  return false;
}

}  // namespace

bool ReduceSupported(DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kProduct:
      return IsValidDataType(static_cast<int>(dtype));
    default:
      return false;
  }
}

bool Reduce(void* out, const void* a, const void* b, int64_t count,
            DataType dtype, ReduceOp op) {
  if (dtype == DataType::kBool) {
    if (op == ReduceOp::kAverage || op == ReduceOp::kAdasum) return false;
    CombineBool(out, a, b, count, op == ReduceOp::kSum || op == ReduceOp::kMax);
    return true;
  }
  switch (op) {
    case ReduceOp::kSum: return Dispatch<Sum>(out, a, b, count, dtype);
    case ReduceOp::kMin: return Dispatch<Min>(out, a, b, count, dtype);
    case ReduceOp::kMax: return Dispatch<Max>(out, a, b, count, dtype);
    case ReduceOp::kProduct: return Dispatch<Product>(out, a, b, count, dtype);
    default: return false;
  }
}

}  // namespace hbcore
