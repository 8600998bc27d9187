// The one buffer of the fast path's collective (controller.h, "The fast
// path"): readiness words combined by bitwise AND and small tensors'
// payloads combined by Sum, so that one allreduce carries both.
//
// Layout, identical on every rank because the controller derives the
// segments from the response cache, which is identical on every rank:
//
//   [header: broken flag, word count, payload bytes, segment count]
//   [segments: dtype, offset, count]   [words]   [payload]
//
// The header travels with the data so that a reduction function that is
// given only two buffers (MPI's user-defined operations are) can combine
// them. Both buffers' headers are equal; CombineBuffers keeps it.
#ifndef HBCORE_BACKENDS_COMBINED_BUFFER_H_
#define HBCORE_BACKENDS_COMBINED_BUFFER_H_

#include <cstdint>
#include <vector>

#include "negotiation/control_comm.h"

namespace hbcore {

// The buffer holding `words`, `payload` and the layout of `segments`.
std::vector<uint8_t> PackCombined(const std::vector<uint64_t>& words,
                                  const std::vector<uint8_t>& payload,
                                  const std::vector<PayloadSegment>& segments);

// The size in bytes of a packed buffer, read from its header.
size_t CombinedSize(const uint8_t* buffer);

// inout = in (combined) inout: AND of the words, Sum of each segment.
// Returns false, and marks inout broken, when the two layouts differ (a
// broken invariant) or either was marked broken already.
bool CombineBuffers(const uint8_t* in, uint8_t* inout);

// Whether a combination that produced `buffer` met different layouts.
bool CombinedBroken(const uint8_t* buffer);

// Copies the words and payload of a combined buffer back out (sizes as
// packed).
void UnpackCombined(const uint8_t* buffer, std::vector<uint64_t>* words,
                    std::vector<uint8_t>* payload);

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_COMBINED_BUFFER_H_
