#include "negotiation/controller.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"

namespace hbcore {
namespace {

constexpr uint64_t kFlagSlowPath = 1;
constexpr uint64_t kFlagStallCheck = 2;
constexpr uint64_t kFlagActive = 4;  // this rank has not joined
constexpr uint64_t kFlagJoined = 8;  // this rank has joined (step G)

// Whether a cached response may ride the fast path (step E): a payload the
// collective can Sum on the host and the result needs no prescale.
bool FastPathKind(const Response& r) {
  return r.op == OpType::kAllreduce && !r.is_error() &&
         r.device == HB_DEVICE_CPU && r.prescale == 1.0 &&
         (r.reduce_op == ReduceOp::kSum || r.reduce_op == ReduceOp::kAverage);
}

// The bytes a response takes in the payload (padded to 8), or -1 when it
// cannot ride the fast path under `budget` bytes at all.
int64_t FastPathBytes(const Response& r, int64_t budget) {
  if (r.name.empty() || !FastPathKind(r)) return -1;
  const int64_t padded =
      (NumElements(r.shape) * DataTypeSize(r.dtype) + 7) / 8 * 8;
  return padded <= budget ? padded : -1;
}

}  // namespace

Controller::Controller(ControlComm* comm, const Config& config,
                       ProcessSetInfo set)
    : comm_(comm), config_(config), cache_(config.cache_capacity),
      stall_(config, set.Suffix()) {
  if (set.ranks.empty()) set = ProcessSetInfo::Global(comm_->size());
  if (comm_->rank() == 0) {
    coordinator_ = std::make_unique<Coordinator>(std::move(set));
  }
}

void Controller::Join() {
  just_joined_ = !joined_;
  joined_ = true;
}

Status Controller::RunCycle(PendingTable* pending, const CycleInput& input,
                            CycleOutput* output) {
  *output = CycleOutput();
  const auto now = Clock::now();
  const bool stall_check = stall_.Due(*pending, now);
  if (stall_check) stall_.Checked(now);
  const bool just_joined = just_joined_;
  just_joined_ = false;
  ++cycles_;
  UpdateFastLayout();
  const int words_per_set = (cache_.capacity() + 63) / 64;
  std::vector<uint64_t> words(1 + 2 * words_per_set, 0);
  uint64_t* hits = words.data() + 1;
  uint64_t* invalid = hits + words_per_set;  // stored inverted

  // A. Classify.
  RequestList mine;
  for (auto& kv : *pending) {
    TensorEntry& e = kv.second;
    if (e.announced) continue;
    e.announced = true;
    int slot = -1;
    ResponseCache::Lookup found = ResponseCache::Lookup::kMiss;
    // Joins and process-set operations are never cached.
    if (e.request.op != OpType::kJoin &&
        !IsInternalOpType(static_cast<int>(e.request.op))) {
      found = cache_.Find(e.request, &slot);
    }
    if (found == ResponseCache::Lookup::kHit) {
      e.cache_slot = slot;
      continue;
    }
    if (found == ResponseCache::Lookup::kInvalid) {
      invalid[slot / 64] |= uint64_t{1} << (slot % 64);
    }
    mine.requests.push_back(e.request);
  }
  for (auto& kv : *pending) {
    int slot = kv.second.cache_slot;
    if (slot >= 0) hits[slot / 64] |= uint64_t{1} << (slot % 64);
  }
  if (joined_) {
    for (int i = 0; i < words_per_set; ++i) hits[i] = ~uint64_t{0};
  }
  if (just_joined) {
    for (int i = 0; i < words_per_set; ++i) invalid[i] = ~uint64_t{0};
  }
  for (int i = 0; i < words_per_set; ++i) invalid[i] = ~invalid[i];
  uint64_t flags = 0;
  if (!mine.requests.empty() || input.shutdown || !input.tuning.empty()) {
    flags |= kFlagSlowPath;
  }
  if (stall_check) flags |= kFlagStallCheck;
  if (!joined_) flags |= kFlagActive;
  if (joined_) flags |= kFlagJoined;
  words[0] = ~flags;

  // F. The payload: this rank's inputs for the layout slots it hit.
  std::vector<uint8_t> payload(fast_payload_bytes_, 0);
  if (!joined_ && !fast_slots_.empty()) {
    for (const auto& kv : *pending) {
      const TensorEntry& e = kv.second;
      if (e.cache_slot < 0 || fast_index_[e.cache_slot] < 0) continue;
      const PayloadSegment& seg =
          fast_slots_[fast_index_[e.cache_slot]].segment;
      if (seg.count == 0) continue;
      std::memcpy(payload.data() + seg.offset, e.input,
                  seg.count * DataTypeSize(seg.dtype));
    }
  }

  // B. One small collective (with the payload when the layout has slots).
  Status s = fast_slots_.empty()
                 ? comm_->AllreduceAnd(&words)
                 : comm_->AllreduceAndSum(&words, &payload, fast_segments_);
  if (!s.ok()) return s;
  flags = ~words[0];
  for (int i = 0; i < words_per_set; ++i) invalid[i] = ~invalid[i];

  // D (first half): ready cache slots, before any slot changes.
  if (flags & kFlagActive) {
    for (int slot = 0; slot < cache_.capacity(); ++slot) {
      const uint64_t ready = hits[slot / 64] & ~invalid[slot / 64];
      if (ready == 0) {  // skip the rest of an empty word
        slot |= 63;
        continue;
      }
      if (!(ready >> (slot % 64) & 1)) continue;
      // All-ones words from joined ranks can name unused slots.
      const Response& cached = cache_.Get(slot);
      if (cached.name.empty()) continue;
      output->responses.push_back(cached);
      output->from_cache.push_back(true);
      output->cache_slots.push_back(slot);
      // G. Carried: every rank added its input to the payload.
      const bool carried = fast_index_[slot] >= 0 && !(flags & kFlagJoined);
      output->carried.push_back(
          carried ? fast_slots_[fast_index_[slot]].segment.offset : -1);
      if (fast_index_[slot] < 0 &&
          FastPathBytes(cached, config_.fast_path_bytes) >= 0) {
        fast_missed_ = true;  // step E: a recurring tensor left out
      }
    }
  }
  output->payload = std::move(payload);
  // D (second half): invalid slots go on every rank.
  for (int slot = 0; slot < cache_.capacity(); ++slot) {
    if (invalid[slot / 64] == 0) {
      slot |= 63;
      continue;
    }
    if (!(invalid[slot / 64] >> (slot % 64) & 1)) continue;
    cache_.Erase(slot);
    for (auto& kv : *pending) {
      if (kv.second.cache_slot == slot) {
        kv.second.cache_slot = -1;
        kv.second.announced = false;
        output->reannounce = true;
      }
    }
  }

  // C. Slow path.
  if (flags & kFlagSlowPath || flags & kFlagStallCheck) {
    mine.shutdown = input.shutdown;
    mine.shutdown_reason = input.shutdown_reason;
    mine.tuning = input.tuning;
    if (flags & kFlagStallCheck) {
      mine.stall_check = true;
      for (const auto& kv : *pending) {
        if (kv.second.request.op == OpType::kJoin) continue;
        mine.pending_names.push_back(kv.first);
        mine.pending_ages.push_back(
            std::chrono::duration<double>(now - kv.second.enqueued).count());
      }
    }
    s = SlowPath(mine, output);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status Controller::SlowPath(const RequestList& mine, CycleOutput* output) {
  std::vector<std::string> gathered;
  Status s = comm_->Gather(Serialize(mine), &gathered);
  if (!s.ok()) return s;
  std::string bytes;
  if (comm_->rank() == 0) bytes = Serialize(Coordinate(gathered));
  s = comm_->Broadcast(&bytes);
  if (!s.ok()) return s;
  ResponseList list;
  HB_CHECK(Deserialize(bytes, &list), "malformed response list");
  for (Response& r : list.responses) {
    output->responses.push_back(std::move(r));
    output->from_cache.push_back(false);
    output->cache_slots.push_back(-1);
    output->carried.push_back(-1);
  }
  output->shutdown = list.shutdown;
  output->shutdown_reason = list.shutdown_reason;
  output->tuning = std::move(list.tuning);
  return Status::OK();
}

ResponseList Controller::Coordinate(const std::vector<std::string>& gathered) {
  ResponseList out;
  std::vector<RequestList> lists(gathered.size());
  for (size_t rank = 0; rank < gathered.size(); ++rank) {
    HB_CHECK(Deserialize(gathered[rank], &lists[rank]),
             "malformed request list from rank " << rank);
    coordinator_->Add(lists[rank], static_cast<int>(rank));
    if (lists[rank].shutdown && !out.shutdown) {
      out.shutdown = true;
      out.shutdown_reason = lists[rank].shutdown_reason;
    }
  }
  out.responses = coordinator_->TakeResponses();
  // Only the coordinator's own rank proposes (autotune.h, item 4).
  if (!lists.empty()) out.tuning = lists[0].tuning;
  if (!lists.empty() && lists[0].stall_check) {
    std::string reason = stall_.Judge(coordinator_->FindStalls(lists));
    if (!reason.empty() && !out.shutdown) {
      out.shutdown = true;
      out.shutdown_reason = reason;
    }
  }
  return out;
}

void Controller::Commit(const CycleOutput& cycle, size_t i,
                        const TensorEntry* local) {
  const Response& r = cycle.responses[i];
  if (r.op == OpType::kJoin) joined_ = false;  // every rank has joined
  if (cycle.from_cache[i]) {
    cache_.Touch(cycle.cache_slots[i]);
    return;
  }
  if (r.is_error() || r.op == OpType::kJoin ||
      IsInternalOpType(static_cast<int>(r.op)) || cache_.capacity() == 0) {
    return;
  }
  cache_.Put(r, local ? &local->request : nullptr);
}

bool Controller::SetCacheEnabled(bool enabled, PendingTable* pending) {
  const int capacity = enabled ? config_.cache_capacity : 0;
  if (capacity == cache_.capacity()) return false;
  cache_ = ResponseCache(capacity);
  fast_version_ = ~uint64_t{0};  // the new cache may repeat a version
  bool reannounce = false;
  for (auto& kv : *pending) {
    TensorEntry& e = kv.second;
    if (e.cache_slot >= 0) {
      e.cache_slot = -1;
      e.announced = false;
      reannounce = true;
    }
  }
  return reannounce;
}

void Controller::UpdateFastLayout() {
  const bool relayout =
      fast_missed_ && cycles_ - fast_built_cycle_ >= kFastRelayoutCycles;
  if (fast_version_ == cache_.version() && !relayout &&
      static_cast<int>(fast_index_.size()) == cache_.capacity()) {
    return;
  }
  fast_version_ = cache_.version();
  fast_built_cycle_ = cycles_;
  fast_missed_ = false;
  fast_slots_.clear();
  fast_segments_.clear();
  fast_index_.assign(cache_.capacity(), -1);
  fast_payload_bytes_ = 0;
  const int64_t budget = config_.fast_path_bytes;
  if (budget <= 0) return;
  // Candidates, most recently used first (ties cannot happen: each Put and
  // Touch takes the next clock value).
  std::vector<int> candidates;
  for (int slot = 0; slot < cache_.capacity(); ++slot) {
    if (FastPathBytes(cache_.Get(slot), budget) >= 0) candidates.push_back(slot);
  }
  std::sort(candidates.begin(), candidates.end(), [this](int a, int b) {
    return cache_.last_use(a) > cache_.last_use(b);
  });
  std::vector<int> chosen;
  int64_t bytes = 0;
  for (int slot : candidates) {
    if (chosen.size() >= static_cast<size_t>(kFastPathTensors)) break;
    const int64_t padded = FastPathBytes(cache_.Get(slot), budget);
    if (bytes + padded > budget) continue;
    bytes += padded;
    chosen.push_back(slot);
  }
  std::sort(chosen.begin(), chosen.end());
  for (int slot : chosen) {
    const Response& r = cache_.Get(slot);
    FastSlot f;
    f.slot = slot;
    f.segment.dtype = r.dtype;
    f.segment.offset = fast_payload_bytes_;
    f.segment.count = NumElements(r.shape);
    fast_payload_bytes_ += FastPathBytes(r, budget);
    fast_index_[slot] = static_cast<int>(fast_slots_.size());
    fast_slots_.push_back(f);
    fast_segments_.push_back(f.segment);
  }
}

bool Controller::RevalidateSlots(PendingTable* pending) {
  bool changed = false;
  for (auto& kv : *pending) {
    TensorEntry& e = kv.second;
    if (e.cache_slot >= 0 && cache_.Get(e.cache_slot).name != kv.first) {
      e.cache_slot = -1;
      e.announced = false;
      changed = true;
    }
  }
  return changed;
}

}  // namespace hbcore
