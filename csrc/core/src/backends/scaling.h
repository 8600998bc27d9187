// Element-wise scaling of buffers (prescale/postscale factors and the 1/size
// of Average), for every data type. Integers are scaled in double precision
// and truncated toward zero; bool buffers are never scaled.
#ifndef HBCORE_BACKENDS_SCALING_H_
#define HBCORE_BACKENDS_SCALING_H_

#include <cstdint>

#include "common/types.h"

namespace hbcore {

// dst[i] = src[i] * factor; dst may equal src. factor == 1 is a plain copy.
void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                double factor);

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_SCALING_H_
