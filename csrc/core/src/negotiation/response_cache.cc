#include "negotiation/response_cache.h"

#include "common/logging.h"

namespace hbcore {

ResponseCache::ResponseCache(int capacity) : slots_(capacity) {}

ResponseCache::Lookup ResponseCache::Find(const Request& request,
                                          int* slot) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return Lookup::kMiss;
  *slot = it->second;
  const Slot& s = slots_[it->second];
  if (s.has_local && s.local.SameSignature(request)) return Lookup::kHit;
  return Lookup::kInvalid;
}

void ResponseCache::Put(const Response& response, const Request* local) {
  if (slots_.empty()) return;
  int target = -1;
  auto it = by_name_.find(response.name);
  if (it != by_name_.end()) {
    target = it->second;
  } else {
    // Lowest free slot, else the least recently used: deterministic because
    // the use clock advances identically on every rank.
    for (int i = 0; i < capacity(); ++i) {
      if (!slots_[i].used) {
        target = i;
        break;
      }
      if (target < 0 || slots_[i].last_use < slots_[target].last_use) {
        target = i;
      }
    }
    if (slots_[target].used) Erase(target);
  }
  Slot& s = slots_[target];
  ++version_;
  s.used = true;
  s.has_local = local != nullptr;
  if (local) s.local = *local;
  s.response = response;
  s.last_use = ++clock_;
  by_name_[response.name] = target;
}

void ResponseCache::Erase(int slot) {
  HB_CHECK(slot >= 0 && slot < capacity(), "cache slot " << slot);
  Slot& s = slots_[slot];
  if (!s.used) return;
  ++version_;
  by_name_.erase(s.response.name);
  s = Slot();
}

}  // namespace hbcore
