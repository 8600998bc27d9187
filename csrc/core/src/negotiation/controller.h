// Negotiation: one cycle of agreeing across ranks on which tensors run.
//
// Cross-rank contract: every rank calls RunCycle the same number of times
// (the runtime's wake-up protocol guarantees it) and applies the cycle's
// responses in the order returned. Within one cycle:
//
//  A. Each rank classifies its entries not yet announced: a cache hit keeps
//     the slot's bit set from now on; a cached name with another signature
//     marks the slot invalid; everything else goes to the slow path.
//  B. One AND-allreduce of [~flags | hit bits | ~invalid bits] gives the OR
//     of the flags (slow path needed, stall check), the slots pending on
//     every rank (ready), and the OR of the invalid bits.
//  C. If any rank needs it, the slow path: each rank's RequestList goes to
//     the coordinator (rank 0), whose ResponseList comes back to all.
//  D. The cycle's responses: ready cache slots in slot order, then the
//     coordinator's responses. Invalid slots are erased on every rank, and
//     local entries that were waiting on them are announced again next
//     cycle (through the slow path).
//
// A rank that joined sets every hit bit so cached tensors of the others do
// not wait for it; a cycle in which no rank is still active ignores them.
// In the first cycle after it joins, it invalidates every slot instead, so
// responses cached with this rank's old contribution (e.g. allgather row
// counts) are renegotiated knowing it joined.
//
// Each process set has its own controller over its own communicator (set
// ranks; rank 0 of the set coordinates), with its own response cache and
// stall inspector; the runtime runs them in ascending set id each cycle.
// Join and shutdown exist only in the global set's controller.
//
// The controller owns what negotiation reads and writes on this rank: the
// response cache, this rank's join state (from Join() until the join's
// response is committed) and the stall inspector; the coordinator (rank 0)
// owns the job-wide view.
#ifndef HBCORE_NEGOTIATION_CONTROLLER_H_
#define HBCORE_NEGOTIATION_CONTROLLER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "negotiation/control_comm.h"
#include "negotiation/coordinator.h"
#include "negotiation/process_set.h"
#include "negotiation/response_cache.h"
#include "negotiation/stall_inspector.h"
#include "negotiation/tensor_entry.h"

namespace hbcore {

// The background thread's table of entries waiting for negotiation or
// execution, by name. Ordered so that iteration is deterministic.
using PendingTable = std::map<std::string, TensorEntry>;

struct CycleInput {
  bool shutdown = false;
  std::string shutdown_reason;
  // Rank 0 of the global set: autotune's proposal to carry (autotune.h,
  // item 4); it makes the cycle take the slow path.
  std::string tuning;
};

struct CycleOutput {
  std::vector<Response> responses;
  // Which responses came from the cache (Touch) or coordinator (Put).
  std::vector<bool> from_cache;
  std::vector<int> cache_slots;
  bool shutdown = false;
  std::string shutdown_reason;
  // The proposal every rank applies after this cycle (empty: none).
  std::string tuning;
  // Entries re-queued for announcement: the next cycle must run.
  bool reannounce = false;
};

class Controller {
 public:
  // `set`: the process set `comm` connects (ranks in messages, the
  // coordinator's view); empty ranks mean the global set of comm->size().
  Controller(ControlComm* comm, const Config& config,
             ProcessSetInfo set = ProcessSetInfo());

  Status RunCycle(PendingTable* pending, const CycleInput& input,
                  CycleOutput* output);

  // This rank's join request entered the pending table.
  void Join();
  // Whether this rank needs a cycle for a stall check (StallInspector).
  bool StallCheckDue(const PendingTable& pending,
                     Clock::time_point now) const {
    return stall_.Due(pending, now);
  }

  // After executing response i of a cycle, in order, on every rank.
  void Commit(const CycleOutput& cycle, size_t i, const TensorEntry* local);
  // Entries whose slot was reused by Commit go back to the slow path.
  bool RevalidateSlots(PendingTable* pending);
  // Autotune: turns the response cache on (config's capacity) or off (no
  // slots). Called by every member at the same point between cycles
  // (autotune.h, item 5), so the bit-vector keeps one length on every
  // rank. The cache starts empty; entries that were waiting on a slot go
  // back to the slow path (returns true when there were any).
  bool SetCacheEnabled(bool enabled, PendingTable* pending);

 private:
  Status SlowPath(const RequestList& mine, CycleOutput* output);
  ResponseList Coordinate(const std::vector<std::string>& gathered);

  ControlComm* comm_;
  Config config_;
  ResponseCache cache_;
  StallInspector stall_;
  bool joined_ = false;       // from Join() until the join response commits
  bool just_joined_ = false;  // until the first cycle after Join() ran
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_CONTROLLER_H_
