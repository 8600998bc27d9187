// The element-wise reductions of the fake NCCL (libfakenccl only).
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_REDUCE_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_REDUCE_H_

#include <cstddef>

namespace fakegpu {

// ncclRedOp_t values of the built-in ops; PreMulSum ops (ids 5 and up,
// made by ncclRedOpCreatePreMulSum) reduce with kRedPreMulSum.
enum RedKind {
  kRedSum = 0,
  kRedProd = 1,
  kRedMax = 2,
  kRedMin = 3,
  kRedAvg = 4,
  kRedPreMulSum = 5,
};

// The element size of an ncclDataType_t (0..9), 0 for an unknown one.
size_t DtypeSize(int dtype);
const char* DtypeName(int dtype);
const char* RedKindName(int kind);

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... in source order, for
// i < count, so every rank reducing the same sources in the same order
// gets bit-identical results.
// - Integers wrap around; Avg divides the sum by `divisor` like C (toward
//   zero). Float16 and bfloat16 are reduced in float and rounded once, to
//   nearest even. Max / Min propagate NaN.
// - PreMulSum: the sum of scalars[s] * srcs[s][i], each scalar pointing to
//   one value of `dtype` (as in NCCL, where each rank's scalar multiplies
//   its own contribution); `scalars` is unused for other kinds.
// dst may be exactly one of the sources (in-place), as elements are read
// in chunks before the chunk is written; partial overlap is not allowed.
void ReduceArrays(int kind, int dtype, const void* const* scalars,
                  int divisor, const void* const* srcs, int nsrcs, void* dst,
                  size_t count);

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_REDUCE_H_
