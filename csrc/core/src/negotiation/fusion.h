// Fusion planning: which responses of a cycle run as one collective.
//
// The plan is a pure function of the response list, which is identical on
// every rank, so every rank runs the same collectives in the same order.
// Allreduces with the same data type, reduce op and device are packed
// greedily into batches of at most `threshold_bytes`, and so are alltoalls
// on the same device (whatever their dtypes: the fused exchange moves
// bytes, one MPI_Alltoallv for the batch; the sharded embedding's id and
// row exchanges of all tables of a step meet here); every other response
// runs alone. A batch keeps its members in response order.
//
// Tensors of kDirectTensorBytes or more also run alone. Through the fusion
// buffer, packing copies each byte in and out, which for a large tensor
// costs about as much as the collective itself, while the per-collective
// latency that fusion saves is negligible next to its transfer time.
//
// How a lone allreduce runs (Executor::Allreduce): where the backend
// reduces batches where they are (node shared memory, also within each
// host of a hierarchical job), a lone tensor of kLoneLayoutBytes or more
// goes that way too, as a batch of one; else, and for smaller tensors,
// straight through MPI's allreduce. Measured at 2 ranks on one host
// (benchmarks/allreduce.py, alternating builds, 2026-11-26): in place, the
// shared-memory path took 34 against 54 us at 256 KiB, 250 against 500 us
// at 4 MiB, 5.5 against 23 ms at 64 MiB; at 64 KiB and below MPI was
// faster (31 against 37 us: the shared path's two barriers).
#ifndef HBCORE_NEGOTIATION_FUSION_H_
#define HBCORE_NEGOTIATION_FUSION_H_

#include <cstdint>
#include <vector>

#include "negotiation/message.h"

namespace hbcore {

using FusionBatch = std::vector<size_t>;  // indices into the response list

constexpr int64_t kDirectTensorBytes = int64_t{1} << 20;
constexpr int64_t kLoneLayoutBytes = int64_t{128} << 10;

std::vector<FusionBatch> PlanFusion(const std::vector<Response>& responses,
                                    int64_t threshold_bytes);

// Bytes a response moves: an allreduce's tensor, or every row of an
// alltoall (summed over all senders, so the same on every rank).
int64_t ResponseBytes(const Response& response);

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_FUSION_H_
