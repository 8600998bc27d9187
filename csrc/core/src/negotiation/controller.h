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
// The fast path (HB_FAST_PATH_THRESHOLD bytes; 0 turns it off) makes a
// cycle of cached small allreduces one round trip, by carrying their data in
// step B's collective:
//
//  E. Layout. The cached responses that are CPU allreduces with reduce op
//     Sum or Average and prescale 1, most recently used first (the cache's
//     use clock), while their payloads (each padded to 8 bytes) fit the
//     threshold, at most kFastPathTensors; offsets in slot order. It is a
//     function of the response cache alone, so it is the same on every
//     rank. It is recomputed when the cache's version changes, and when a
//     cycle found a ready slot that could ride but is outside the layout
//     (a "miss", seen alike by every rank since readiness is agreed in
//     step B), at most once per kFastRelayoutCycles cycles: responses
//     cached early and never used again (a warm-up's tensors) otherwise
//     keep the recurring ones out for as long as they stay cached.
//  F. Contribution. Step B then also carries a payload of the layout's
//     size: each rank writes the input of every entry that hit a layout
//     slot, zeros elsewhere. One collective combines the words by AND and
//     the payload by Sum (ControlComm::AllreduceAndSum).
//  G. Use. A ready slot of the layout is "carried" in a cycle in which no
//     rank has joined: every rank set its bit, so every rank added its
//     input, and the reduced payload is the result; the executor only
//     copies it out (scaled by 1/size for Average, and postscale). Every
//     other payload is discarded (some rank added zeros), and its slot
//     waits or runs as before. A joined rank sets every hit bit without
//     contributing, so a cycle after a join carries nothing (the joined
//     flag travels in the flags word).
//
// Mismatches never reach a payload: a rank whose request differs from the
// one it cached sets the slot's invalid bit, not its hit bit, so the slot
// is not ready; it is erased on every rank and the coordinator names the
// tensor (steps A, C, D). Tensors outside the layout (larger, other ops,
// GPU) negotiate exactly as without the fast path; a cycle carries the
// layout's payload, zeros included, whenever the layout is not empty.
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
  // Per response: the byte offset of its reduced data in `payload` when the
  // fast path carried it (step G), else -1.
  std::vector<int64_t> carried;
  std::vector<uint8_t> payload;
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

  // Most tensors one cycle's payload carries (step E): bounds the layout
  // description every fast-path collective sends with the data.
  static constexpr int kFastPathTensors = 64;
  // Fewest cycles between two layouts recomputed for a miss (step E): more
  // recurring small tensors than a layout holds would otherwise recompute
  // it every cycle.
  static constexpr uint64_t kFastRelayoutCycles = 8;

 private:
  // One layout slot of the fast path (step E).
  struct FastSlot {
    int slot = -1;
    PayloadSegment segment;
  };
  // Step E: recomputes the layout if the cache changed since the last time,
  // or after a miss.
  void UpdateFastLayout();
  Status SlowPath(const RequestList& mine, CycleOutput* output);
  ResponseList Coordinate(const std::vector<std::string>& gathered);

  ControlComm* comm_;
  Config config_;
  ResponseCache cache_;
  StallInspector stall_;
  bool joined_ = false;       // from Join() until the join response commits
  bool just_joined_ = false;  // until the first cycle after Join() ran
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  // The fast path's layout (step E), valid for cache version
  // fast_version_; fast_index_[slot] is the slot's index in fast_slots_ or
  // -1.
  std::vector<FastSlot> fast_slots_;
  std::vector<PayloadSegment> fast_segments_;
  std::vector<int> fast_index_;
  int64_t fast_payload_bytes_ = 0;
  uint64_t fast_version_ = ~uint64_t{0};
  // Cycles run (the same count on every rank), the cycle whose layout is
  // current, and whether a cycle since then missed (step E).
  uint64_t cycles_ = 0;
  uint64_t fast_built_cycle_ = 0;
  bool fast_missed_ = false;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_CONTROLLER_H_
