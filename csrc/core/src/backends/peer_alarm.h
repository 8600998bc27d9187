// Failure notices between ranks, outside negotiation: when a rank's GPU
// data plane fails (an NCCL or CUDA error, an aborted communicator), its
// peers may be blocked waiting for it inside a collective, where
// negotiation cannot reach them. The failing rank raises an alarm; the
// peers' wait loops poll for it, abort their own communicators and fail the
// collective, so the error reaches every rank and nothing hangs.
//
// Protocol (all calls from the background thread):
//  1. Raise(set, peers, why) sends `why` to each peer, tagged with the
//     process set id, without blocking.
//  2. Poll(set, &why) receives whatever has arrived (for any set; notices
//     for other sets are kept for them) and reports the first notice for
//     `set`. Polling never blocks.
//  3. Drain() is collective over every rank of the job, after the last
//     cycle: the ranks exchange how many notices each sent to each other,
//     receive the ones still in flight and complete their sends, so no
//     message outlives the communicator.
#ifndef HBCORE_BACKENDS_PEER_ALARM_H_
#define HBCORE_BACKENDS_PEER_ALARM_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace hbcore {

class PeerAlarm {
 public:
  virtual ~PeerAlarm() = default;
  // `peers`: global ranks (this rank is skipped if listed).
  virtual void Raise(int set_id, const std::vector<int>& peers,
                     const std::string& why) = 0;
  virtual bool Poll(int set_id, std::string* why) = 0;
  virtual Status Drain() = 0;
};

}  // namespace hbcore

#endif  // HBCORE_BACKENDS_PEER_ALARM_H_
