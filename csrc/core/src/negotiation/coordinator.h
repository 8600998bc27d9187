// The coordinator's bookkeeping (runs on rank 0 only; pure logic, no MPI).
//
// Protocol (slow path of one cycle, see controller.h):
//  1. Every rank's RequestList of the cycle is added, in rank order.
//  2. A tensor is complete when every rank that has not joined asked for it.
//     Complete tensors become responses in the order they completed, so the
//     order is a function of the inputs alone and identical for any run.
//  3. A complete tensor whose requests disagree (op, dtype, shape rules per
//     op, root, reduce op, scale factors, device) becomes an ERROR response
//     that names the tensor, the ranks and what differed; the other tensors
//     are unaffected.
//  4. In a process set other than the global one, ranks are set ranks
//     (the set's communicator); messages name them by their global rank
//     and the set. A broadcast's root arrives as a global rank and leaves
//     as a set rank. Join exists only in the global set.
//  5. An add_process_set (internal op, global set only) completes like a
//     collective; the members are those named by every rank that names
//     any (see ValidateAdd), the same list on every rank.
//  6. Join: a rank that joined counts as having submitted every tensor (it
//     contributes zeros / no rows). When all ranks joined, one JOIN response
//     carries the last rank that joined, and the joined set is reset.
#ifndef HBCORE_NEGOTIATION_COORDINATOR_H_
#define HBCORE_NEGOTIATION_COORDINATOR_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "negotiation/message.h"
#include "negotiation/process_set.h"

namespace hbcore {

struct StallReport {
  std::string name;
  // Global ranks.
  std::vector<int> missing_ranks;
  std::vector<int> ready_ranks;
  double age_seconds = 0;
};

class Coordinator {
 public:
  explicit Coordinator(int size);  // the global set of `size` ranks
  explicit Coordinator(ProcessSetInfo set);

  // Step 1 for one rank. Complete tensors are queued for TakeResponses.
  void Add(const RequestList& list, int rank);
  // Step 2-4: the responses completed since the last call.
  std::vector<Response> TakeResponses();

  // Tensors pending on some ranks but not all, from every rank's
  // pending_names of a stall-check cycle (one list per rank).
  std::vector<StallReport> FindStalls(
      const std::vector<RequestList>& lists) const;

  bool HasJoined(int rank) const { return joined_.count(rank) != 0; }

 private:
  void AddRequest(const Request& request);
  void CompleteIfReady(const std::string& name);
  Response Validate(const std::vector<Request>& requests) const;
  Response ValidateAdd(const std::vector<Request>& requests,
                       Response resp) const;
  int ActiveRanks() const { return size_ - static_cast<int>(joined_.size()); }

  ProcessSetInfo set_;
  int size_;
  // Name -> requests received so far (at most one per rank).
  std::map<std::string, std::vector<Request>> table_;
  // Names in the order they first arrived, to scan after a join.
  std::vector<std::string> arrival_order_;
  std::set<int> joined_;
  int last_joined_ = -1;
  std::vector<Response> ready_;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_COORDINATOR_H_
