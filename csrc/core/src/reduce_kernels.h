// Element-wise reduction of two host buffers, for every data type and
// reduce op the core supports. Used where hbcore reduces data itself (the
// node-shared-memory allreduce) rather than through MPI's operations; the
// semantics match the MPI backend's (bool: Sum/Max = or, Min/Product = and;
// float16/bfloat16 are computed in float and rounded to nearest even).
#ifndef HBCORE_REDUCE_KERNELS_H_
#define HBCORE_REDUCE_KERNELS_H_

#include <cstdint>

#include "types.h"

namespace hbcore {

// acc[i] = acc[i] (op) in[i] for i < count. `op` must be Sum, Min, Max or
// Product (the executor has already turned Average into Sum); returns false
// for any other op. The buffers must not overlap.
bool ReduceInto(void* acc, const void* in, int64_t count, DataType dtype,
                ReduceOp op);

}  // namespace hbcore

#endif  // HBCORE_REDUCE_KERNELS_H_
