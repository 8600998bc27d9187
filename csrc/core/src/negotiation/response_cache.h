// Response cache: the fast path of negotiation.
//
// Invariant: every rank holds the same (name -> slot, response) mapping.
// It holds because every change is driven by data identical on all ranks:
// Put() and Touch() run for the same responses in the same order, and Erase()
// runs for the slots whose invalid bit was OR-reduced across ranks.
//
// A rank's new request hits when its name is cached and the request has the
// same signature this rank sent when the entry was made; then only the
// slot's bit needs to travel. If the name is cached with another signature
// the slot is invalidated on every rank and the request takes the slow path.
#ifndef HBCORE_NEGOTIATION_RESPONSE_CACHE_H_
#define HBCORE_NEGOTIATION_RESPONSE_CACHE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "negotiation/message.h"

namespace hbcore {

class ResponseCache {
 public:
  enum class Lookup { kMiss, kHit, kInvalid };

  explicit ResponseCache(int capacity);

  int capacity() const { return static_cast<int>(slots_.size()); }
  Lookup Find(const Request& request, int* slot) const;
  // Caches `response`; `local` is this rank's request for it, or nullptr on a
  // joined rank (whose later requests then miss and invalidate the slot).
  void Put(const Response& response, const Request* local);
  const Response& Get(int slot) const { return slots_[slot].response; }
  void Touch(int slot) { slots_[slot].last_use = ++clock_; }
  // The use clock's value at the slot's last Put or Touch: the same on
  // every rank (0 for a free slot).
  uint64_t last_use(int slot) const { return slots_[slot].last_use; }
  void Erase(int slot);
  // Changes with every Put and Erase (not Touch): the same on every rank,
  // so derived views (the fast path's layout) know when to recompute.
  uint64_t version() const { return version_; }

 private:
  struct Slot {
    bool used = false;
    bool has_local = false;
    Request local;
    Response response;
    uint64_t last_use = 0;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> by_name_;
  uint64_t clock_ = 0;
  uint64_t version_ = 0;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_RESPONSE_CACHE_H_
