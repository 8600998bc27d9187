#include "fusion.h"

namespace hbcore {
namespace {

bool Fusable(const Response& r) {
  return r.op == OpType::kAllreduce && !r.is_error();
}

bool SameKind(const Response& a, const Response& b) {
  return a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.device == b.device;
}

}  // namespace

int64_t ResponseBytes(const Response& response) {
  return NumElements(response.shape) * DataTypeSize(response.dtype);
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
