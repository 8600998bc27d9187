// Control plane: the few collectives negotiation needs, over a communicator
// private to the core. Every call is collective in the usual sense: all
// ranks make the same calls in the same order.
//
// Waiting must not spin: implementations poll non-blocking operations with a
// backoff that ends in short sleeps, so a background thread waiting for a
// slow peer leaves the CPU to the model's compute threads.
#ifndef HBCORE_NEGOTIATION_CONTROL_COMM_H_
#define HBCORE_NEGOTIATION_CONTROL_COMM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hbcore {

// One tensor in the payload of AllreduceAndSum: `count` elements of `dtype`
// starting at byte `offset`.
struct PayloadSegment {
  DataType dtype = DataType::kFloat32;
  int64_t offset = 0;
  int64_t count = 0;
};

class ControlComm {
 public:
  virtual ~ControlComm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Bitwise AND of `words` across ranks, in place.
  virtual Status AllreduceAnd(std::vector<uint64_t>* words) = 0;
  // In one collective: the bitwise AND of `words` and the element-wise Sum
  // of each segment of `payload`, in place (the controller's fast path).
  // Every rank passes the same word count, payload size and segments.
  virtual Status AllreduceAndSum(std::vector<uint64_t>* words,
                                 std::vector<uint8_t>* payload,
                                 const std::vector<PayloadSegment>& segments) = 0;
  // Rank 0 receives every rank's bytes in rank order; others get nothing.
  virtual Status Gather(const std::string& mine,
                        std::vector<std::string>* all) = 0;
  // Rank 0's bytes replace everyone else's.
  virtual Status Broadcast(std::string* bytes) = 0;

  // Wake-ups: a rank with new work tells every peer that cycle `cycle` will
  // run; peers that are idle poll for it. Point-to-point and non-blocking.
  virtual void SendWake(uint64_t cycle) = 0;
  // Drains received wake-ups; returns the highest cycle asked for, if any.
  virtual bool PollWake(uint64_t* cycle) = 0;

  // Collective, after the last cycle (a negotiated shutdown): receives the
  // wake-ups still in flight to this rank and completes its own sends, so
  // no message outlives the communicator.
  virtual Status Drain() = 0;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_CONTROL_COMM_H_
