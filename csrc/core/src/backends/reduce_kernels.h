// Element-wise reduction of two host buffers, for every data type and
// reduce op the core supports. Used where hbcore reduces data itself (the
// node-shared-memory allreduce) rather than through MPI's operations; the
// semantics match the MPI backend's (bool: Sum/Max = or, Min/Product = and;
// float16/bfloat16 are computed in float and rounded to nearest even).
#ifndef HBCORE_BACKENDS_REDUCE_KERNELS_H_
#define HBCORE_BACKENDS_REDUCE_KERNELS_H_

#include <cstdint>

#include "common/types.h"

namespace hbcore {

// True for the combinations Reduce computes: Sum, Min, Max and Product on
// every data type (the executor has already turned Average into Sum).
bool ReduceSupported(DataType dtype, ReduceOp op);

// out[i] = a[i] (op) b[i] for i < count; a no-op returning false where
// ReduceSupported is false. `out` may be `a`; no other buffers overlap.
bool Reduce(void* out, const void* a, const void* b, int64_t count,
            DataType dtype, ReduceOp op);

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_REDUCE_KERNELS_H_
