// Negotiation messages. Requests travel from every rank to the coordinator
// (rank 0); responses travel back to every rank. Both are plain values with
// a compact binary encoding (little-endian host order: all ranks of a job run
// the same build on the same architecture).
#ifndef HBCORE_NEGOTIATION_MESSAGE_H_
#define HBCORE_NEGOTIATION_MESSAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace hbcore {

// What one rank asks for one tensor. Everything here is compared across
// ranks by the coordinator; buffers stay local (see TensorEntry).
struct Request {
  int32_t rank = 0;
  std::string name;
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  int32_t device = HB_DEVICE_CPU;

  // True when the two requests would produce the same response: the key of
  // the response cache's per-rank hit test.
  bool SameSignature(const Request& other) const;
};

// What every rank executes for one tensor, decided by the coordinator.
struct Response {
  OpType op = OpType::kAllreduce;
  std::string name;
  std::string error;  // non-empty: the tensor failed on every rank
  int32_t error_code = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  Shape shape;        // allreduce/broadcast/reducescatter: the common shape
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t device = HB_DEVICE_CPU;
  // allgather: first dimension of every rank (size entries).
  // alltoall: splits matrix, row r = rows rank r sends to each rank.
  std::vector<int64_t> rank_dims;

  bool is_error() const { return !error.empty(); }
};

// One rank's contribution to the slow path of a cycle.
struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
  std::string shutdown_reason;
  // Filled only in a stall-check cycle: every tensor pending on this rank.
  std::vector<std::string> pending_names;
  std::vector<double> pending_ages;  // seconds since each was enqueued
  bool stall_check = false;
  // Rank 0 only: autotune's next parameters (EncodeProposal, autotune.h).
  std::string tuning;
};

// The coordinator's answer, identical on every rank.
struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  std::string shutdown_reason;
  // Autotune's next parameters, applied by every rank after this cycle
  // (autotune.h, item 5); empty: none.
  std::string tuning;
};

std::string Serialize(const RequestList& list);
std::string Serialize(const ResponseList& list);
// Return false on malformed input (a broken invariant: the peer runs the
// same code).
bool Deserialize(const std::string& bytes, RequestList* list);
bool Deserialize(const std::string& bytes, ResponseList* list);

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_MESSAGE_H_
