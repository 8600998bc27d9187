// IEEE binary16 (float16) and bfloat16 <-> float conversions for the fake
// NCCL's reductions, which reduce half types in float and round back to
// nearest, ties to even (NaN stays NaN, overflow becomes infinity).
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_HALF_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fakegpu {

// Storage types: distinct so that templates can tell them apart.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage");

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float HalfToFloat(Half h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1fu;
  uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) {  // infinity, NaN
    return BitsFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero, subnormal: mantissa * 2^-24, exact in float
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

// Rounds q + rem / 2^shift to an integer, ties to even (rem < 2^shift).
inline uint32_t RoundShifted(uint32_t q, uint32_t rem, int shift) {
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return q;
}

inline Half FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  int exponent = static_cast<int>((x >> 23) & 0xffu);
  uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xff) {  // infinity, NaN (kept quiet and non-zero)
    uint16_t payload =
        mantissa ? static_cast<uint16_t>(0x200u | (mantissa >> 13)) : 0;
    return Half{static_cast<uint16_t>(sign | 0x7c00u | payload)};
  }
  int e = exponent - 127 + 15;  // the biased half exponent
  if (e >= 31) return Half{static_cast<uint16_t>(sign | 0x7c00u)};
  if (e <= 0) {
    // A half subnormal: value / 2^-24, from the 24-bit significand.
    // Below 2^-25 (e < -10) everything rounds to zero.
    if (e < -10) return Half{sign};
    uint32_t significand = mantissa | 0x800000u;
    int shift = 14 - e;  // 14..24
    uint32_t q = significand >> shift;
    uint32_t rem = significand & ((1u << shift) - 1u);
    // A carry into 0x400 is the smallest normal half: still right.
    return Half{static_cast<uint16_t>(sign | RoundShifted(q, rem, shift))};
  }
  uint32_t q = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  // A carry may run into the exponent, up to 0x7c00 (infinity): right.
  q = RoundShifted(q, mantissa & 0x1fffu, 13);
  return Half{static_cast<uint16_t>(sign | q)};
}

inline float BFloat16ToFloat(BFloat16 b) {
  return BitsFloat(static_cast<uint32_t>(b.bits) << 16);
}

inline BFloat16 FloatToBFloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet
    return BFloat16{static_cast<uint16_t>((x >> 16) | 0x40u)};
  }
  uint32_t q = x >> 16;
  return BFloat16{static_cast<uint16_t>(RoundShifted(q, x & 0xffffu, 16))};
}

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_HALF_H_
