#include "backends/scaling.h"

#include <cstring>

#include "backends/half.h"

namespace hbcore {
namespace {

template <typename T>
void Scale(T* dst, const T* src, int64_t n, double factor) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = static_cast<T>(static_cast<double>(src[i]) * factor);
  }
}

template <>
void Scale<float>(float* dst, const float* src, int64_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * f;
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ScaleHalf(uint16_t* dst, const uint16_t* src, int64_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) dst[i] = FromFloat(ToFloat(src[i]) * f);
}

}  // namespace

void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                double factor) {
  if (factor == 1.0 || dtype == DataType::kBool) {
    if (dst != src) std::memmove(dst, src, count * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8:
      return Scale(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
                   count, factor);
    case DataType::kInt8:
      return Scale(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src),
                   count, factor);
    case DataType::kUInt16:
      return Scale(static_cast<uint16_t*>(dst),
                   static_cast<const uint16_t*>(src), count, factor);
    case DataType::kInt16:
      return Scale(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src),
                   count, factor);
    case DataType::kInt32:
      return Scale(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src),
                   count, factor);
    case DataType::kInt64:
      return Scale(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src),
                   count, factor);
    case DataType::kFloat32:
      return Scale(static_cast<float*>(dst), static_cast<const float*>(src),
                   count, factor);
    case DataType::kFloat64:
      return Scale(static_cast<double*>(dst), static_cast<const double*>(src),
                   count, factor);
    case DataType::kFloat16:
      return ScaleHalf<Float16ToFloat, FloatToFloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
          factor);
    case DataType::kBFloat16:
      return ScaleHalf<BFloat16ToFloat, FloatToBFloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
          factor);
    case DataType::kBool:
      return;
  }
}

}  // namespace hbcore
