// See fake_reduce.h.
#include "fake_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fake_half.h"

namespace fakegpu {
namespace {

// Storage type T, computed in Arith<T>::C.
template <typename T>
struct Arith {
  using C = T;
  static C Load(T v) { return v; }
  static T Store(C v) { return v; }
};
template <>
struct Arith<Half> {
  using C = float;
  static C Load(Half v) { return HalfToFloat(v); }
  static Half Store(C v) { return FloatToHalf(v); }
};
template <>
struct Arith<BFloat16> {
  using C = float;
  static C Load(BFloat16 v) { return BFloat16ToFloat(v); }
  static BFloat16 Store(C v) { return FloatToBFloat16(v); }
};

// Wrapping integer arithmetic (through the unsigned type: no signed
// overflow), plain arithmetic for floating point.
template <typename C>
C Add(C a, C b) {
  if constexpr (std::is_integral<C>::value) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(
        static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename C>
C Mul(C a, C b) {
  if constexpr (std::is_integral<C>::value) {
    // Promote small types to unsigned int, so the product cannot be a
    // signed int overflow either.
    using U = std::make_unsigned_t<std::common_type_t<C, unsigned>>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename C>
bool IsNan(C v) {
  return v != v;  // false for integers
}

// One reduction: First maps the element of source 0, Combine folds in the
// element of source s, Finish maps the result.
template <typename C>
struct SumOp {
  C First(C x) const { return x; }
  C Combine(C acc, C x, int) const { return Add(acc, x); }
  C Finish(C acc) const { return acc; }
};
template <typename C>
struct ProdOp {
  C First(C x) const { return x; }
  C Combine(C acc, C x, int) const { return Mul(acc, x); }
  C Finish(C acc) const { return acc; }
};
template <typename C>
struct MaxOp {
  C First(C x) const { return x; }
  C Combine(C acc, C x, int) const {
    return (IsNan(x) || x > acc) && !IsNan(acc) ? x : acc;
  }
  C Finish(C acc) const { return acc; }
};
template <typename C>
struct MinOp {
  C First(C x) const { return x; }
  C Combine(C acc, C x, int) const {
    return (IsNan(x) || x < acc) && !IsNan(acc) ? x : acc;
  }
  C Finish(C acc) const { return acc; }
};
template <typename C>
struct AvgOp {
  C divisor;
  C First(C x) const { return x; }
  C Combine(C acc, C x, int) const { return Add(acc, x); }
  C Finish(C acc) const { return static_cast<C>(acc / divisor); }
};
template <typename C>
struct PreMulSumOp {
  std::vector<C> scalars;  // one per source
  C First(C x) const { return Mul(scalars[0], x); }
  C Combine(C acc, C x, int s) const { return Add(acc, Mul(scalars[s], x)); }
  C Finish(C acc) const { return acc; }
};

constexpr size_t kChunk = 2048;

template <typename T, typename Op>
void Run(const Op& op, const void* const* srcs, int nsrcs, void* dst,
         size_t count) {
  using A = Arith<T>;
  using C = typename A::C;
  C acc[kChunk];
  T* out = static_cast<T*>(dst);
  for (size_t base = 0; base < count; base += kChunk) {
    size_t n = std::min(kChunk, count - base);
    const T* first = static_cast<const T*>(srcs[0]) + base;
    for (size_t i = 0; i < n; ++i) acc[i] = op.First(A::Load(first[i]));
    for (int s = 1; s < nsrcs; ++s) {
      const T* src = static_cast<const T*>(srcs[s]) + base;
      for (size_t i = 0; i < n; ++i) {
        acc[i] = op.Combine(acc[i], A::Load(src[i]), s);
      }
    }
    for (size_t i = 0; i < n; ++i) out[base + i] = A::Store(op.Finish(acc[i]));
  }
}

template <typename T>
void RunTyped(int kind, const void* const* scalars, int divisor,
              const void* const* srcs, int nsrcs, void* dst, size_t count) {
  using A = Arith<T>;
  using C = typename A::C;
  switch (kind) {
    case kRedSum: Run<T>(SumOp<C>{}, srcs, nsrcs, dst, count); break;
    case kRedProd: Run<T>(ProdOp<C>{}, srcs, nsrcs, dst, count); break;
    case kRedMax: Run<T>(MaxOp<C>{}, srcs, nsrcs, dst, count); break;
    case kRedMin: Run<T>(MinOp<C>{}, srcs, nsrcs, dst, count); break;
    case kRedAvg:
      Run<T>(AvgOp<C>{static_cast<C>(divisor)}, srcs, nsrcs, dst, count);
      break;
    case kRedPreMulSum: {
      PreMulSumOp<C> op;
      for (int s = 0; s < nsrcs; ++s) {
        T value;
        std::memcpy(&value, scalars[s], sizeof(T));
        op.scalars.push_back(A::Load(value));
      }
      Run<T>(op, srcs, nsrcs, dst, count);
      break;
    }
    default: break;  // validated by the caller
  }
}

}  // namespace

size_t DtypeSize(int dtype) {
  static constexpr size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return dtype >= 0 && dtype < 10 ? kSizes[dtype] : 0;
}

const char* DtypeName(int dtype) {
  static constexpr const char* kNames[] = {
      "int8", "uint8", "int32", "uint32", "int64",
      "uint64", "float16", "float32", "float64", "bfloat16"};
  return dtype >= 0 && dtype < 10 ? kNames[dtype] : "unknown-dtype";
}

const char* RedKindName(int kind) {
  static constexpr const char* kNames[] = {"sum", "prod", "max",
                                           "min", "avg", "premulsum"};
  return kind >= 0 && kind < 6 ? kNames[kind] : "unknown-op";
}

void ReduceArrays(int kind, int dtype, const void* const* scalars,
                  int divisor, const void* const* srcs, int nsrcs, void* dst,
                  size_t count) {
  if (nsrcs < 1 || count == 0) return;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    RunTyped<T>(kind, scalars, divisor, srcs, nsrcs, dst, count);
  };
  switch (dtype) {
    case 0: run(int8_t{}); break;
    case 1: run(uint8_t{}); break;
    case 2: run(int32_t{}); break;
    case 3: run(uint32_t{}); break;
    case 4: run(int64_t{}); break;
    case 5: run(uint64_t{}); break;
    case 6: run(Half{}); break;
    case 7: run(float{}); break;
    case 8: run(double{}); break;
    case 9: run(BFloat16{}); break;
    default: break;  // validated by the caller
  }
}

}  // namespace fakegpu
