// Fusion planning: which responses of a cycle run as one collective.
//
// The plan is a pure function of the response list, which is identical on
// every rank, so every rank runs the same collectives in the same order.
// Allreduces with the same data type, reduce op and device are packed
// greedily into batches of at most `threshold_bytes`; every other response
// runs alone. A batch keeps its members in response order.
//
// When fused batches go through the fusion buffer, tensors of
// kDirectTensorBytes or more also run alone: packing copies each byte in and
// out of the fusion buffer, which for a large tensor costs about as much as
// the collective itself (with shared-memory MPI both are memory copies),
// while the per-collective latency that fusion saves is negligible next to
// its transfer time. A backend that reduces batches where their tensors are
// (Backend::AllreducesLayouts) has no such copies, and large tensors fuse.
#ifndef HBCORE_FUSION_H_
#define HBCORE_FUSION_H_

#include <cstdint>
#include <vector>

#include "message.h"

namespace hbcore {

using FusionBatch = std::vector<size_t>;  // indices into the response list

constexpr int64_t kDirectTensorBytes = int64_t{1} << 20;

// `fuse_large`: whether tensors of kDirectTensorBytes or more may fuse. The
// same on every rank.
std::vector<FusionBatch> PlanFusion(const std::vector<Response>& responses,
                                    int64_t threshold_bytes, bool fuse_large);

int64_t ResponseBytes(const Response& response);

}  // namespace hbcore

#endif  // HBCORE_FUSION_H_
