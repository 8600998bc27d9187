#include "negotiation/fusion.h"

namespace hbcore {
namespace {

bool Fusable(const Response& r) {
  return (r.op == OpType::kAllreduce || r.op == OpType::kAlltoall) &&
         !r.is_error();
}

// Allreduces fuse with allreduces of the same dtype and reduce op (the
// batch is reduced as one typed buffer); alltoalls with any alltoall on the
// same device (the batch moves bytes: each peer's segment is the
// concatenation of every member's rows for that peer).
bool SameKind(const Response& a, const Response& b) {
  if (a.op != b.op || a.device != b.device) return false;
  if (a.op == OpType::kAlltoall) return true;
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op;
}

}  // namespace

int64_t ResponseBytes(const Response& response) {
  const int64_t elem = DataTypeSize(response.dtype);
  if (response.op != OpType::kAlltoall) {
    return NumElements(response.shape) * elem;
  }
  // Every row any rank sends (rank_dims is the same on every rank; the
  // shape's first dimension is one rank's).
  int64_t rows = 0;
  for (int64_t n : response.rank_dims) rows += n;
  Shape row(response.shape.begin() + (response.shape.empty() ? 0 : 1),
            response.shape.end());
  return rows * NumElements(row) * elem;
}

std::vector<FusionBatch> PlanFusion(const std::vector<Response>& responses,
                                    int64_t threshold_bytes) {
  std::vector<FusionBatch> batches;
  std::vector<int64_t> batch_bytes;
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    int64_t bytes = ResponseBytes(r);
    bool placed = false;
    if (Fusable(r) && bytes <= threshold_bytes && bytes < kDirectTensorBytes) {
      for (size_t b = 0; b < batches.size(); ++b) {
        const Response& head = responses[batches[b].front()];
        if (Fusable(head) && SameKind(head, r) &&
            batch_bytes[b] + bytes <= threshold_bytes) {
          batches[b].push_back(i);
          batch_bytes[b] += bytes;
          placed = true;
          break;
        }
      }
    }
    if (!placed) {
      batches.push_back({i});
      batch_bytes.push_back(bytes);
    }
  }
  return batches;
}

}  // namespace hbcore
