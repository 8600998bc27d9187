#include "runtime/autotune.h"

#include <cstdlib>
#include <sstream>

namespace hbcore {
namespace {

// The fields of a Tuning in their text form, by the knob each one pins.
// clang-format off
struct Field {
  const char* key;
  double (*get)(const Tuning&);
  void (*set)(Tuning*, double);
};
const Field kFields[] = {
    {"fusion_threshold",
     [](const Tuning& t) { return static_cast<double>(t.fusion_threshold_bytes); },
     [](Tuning* t, double v) { t->fusion_threshold_bytes = static_cast<int64_t>(v); }},
    {"cycle_time", [](const Tuning& t) { return t.cycle_time_ms; },
     [](Tuning* t, double v) { t->cycle_time_ms = v; }},
    {"cache_enabled", [](const Tuning& t) { return t.cache_enabled ? 1.0 : 0.0; },
     [](Tuning* t, double v) { t->cache_enabled = v != 0; }},
    {"hierarchical_allreduce",
     [](const Tuning& t) { return t.hierarchical_allreduce ? 1.0 : 0.0; },
     [](Tuning* t, double v) { t->hierarchical_allreduce = v != 0; }},
    {"hierarchical_allgather",
     [](const Tuning& t) { return t.hierarchical_allgather ? 1.0 : 0.0; },
     [](Tuning* t, double v) { t->hierarchical_allgather = v != 0; }},
    {"ring_allreduce",
     [](const Tuning& t) { return t.ring_allreduce ? 1.0 : 0.0; },
     [](Tuning* t, double v) { t->ring_allreduce = v != 0; }},
    {"pipeline_piece_bytes",
     [](const Tuning& t) { return static_cast<double>(t.pipeline_piece_bytes); },
     [](Tuning* t, double v) { t->pipeline_piece_bytes = static_cast<int64_t>(v); }},
};
// clang-format on

std::string Join(const Tuning& t, const char* separator) {
  std::ostringstream out;
  out.precision(17);
  bool first = true;
  for (const Field& f : kFields) {
    if (!first) out << separator;
    first = false;
    out << f.key << "=" << f.get(t);
  }
  return out.str();
}

}  // namespace

std::string Tuning::Serialize() const { return Join(*this, ";"); }

std::string Tuning::ToString() const { return Join(*this, " "); }

bool Tuning::Parse(const std::string& text) {
  Tuning t;
  std::istringstream in(text);
  std::string pair;
  size_t found = 0;
  while (std::getline(in, pair, ';')) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = pair.substr(0, eq);
    char* end = nullptr;
    const double v = std::strtod(pair.c_str() + eq + 1, &end);
    if (end == pair.c_str() + eq + 1 || *end != '\0') return false;
    bool known = false;
    for (const Field& f : kFields) {
      if (key == f.key) {
        f.set(&t, v);
        known = true;
      }
    }
    if (!known) return false;
    ++found;
  }
  if (found != sizeof(kFields) / sizeof(kFields[0])) return false;
  *this = t;
  return true;
}

void AutotuneSampler::Start(const Tuning& tuning) {
  measuring_ = true;
  tuning_ = tuning;
  start_ = std::chrono::steady_clock::now();
  bytes_ = 0;
  seen_.clear();
}

bool AutotuneSampler::Record(const Response& response, int64_t bytes,
                             AutotuneSample* out) {
  if (!measuring_) return false;
  int& count = seen_[response.name];
  if (count >= steps_per_sample_) {
    const auto now = std::chrono::steady_clock::now();
    out->tuning = tuning_;
    out->seconds = std::chrono::duration<double>(now - start_).count();
    out->bytes = bytes_;
    out->steps = steps_per_sample_;
    out->score = out->seconds > 0 ? static_cast<double>(bytes_) / out->seconds
                                  : 0.0;
    measuring_ = false;
    return true;
  }
  ++count;
  bytes_ += bytes;
  return false;
}

void AutotuneChannel::Publish(const AutotuneSample& sample) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    samples_.push_back(sample);
  }
  cv_.notify_all();
}

AutotuneChannel::Wait AutotuneChannel::WaitSample(double timeout_s,
                                                  AutotuneSample* out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
               [&] { return closed_ || !samples_.empty(); });
  if (!samples_.empty()) {
    *out = samples_.front();
    samples_.erase(samples_.begin());
    return Wait::kSample;
  }
  return closed_ ? Wait::kClosed : Wait::kTimeout;
}

void AutotuneChannel::Propose(const Tuning& tuning, bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  proposal_ = tuning;
  final_ = final;
  proposed_ = true;
}

bool AutotuneChannel::TakeProposal(Tuning* tuning, bool* final) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!proposed_) return false;
  proposed_ = false;
  *tuning = proposal_;
  *final = final_;
  return true;
}

bool AutotuneChannel::HasProposal() {
  std::lock_guard<std::mutex> lock(mu_);
  return proposed_;
}

void AutotuneChannel::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

std::string EncodeProposal(const Tuning& tuning, bool final) {
  return (final ? "F" : "N") + tuning.Serialize();
}

bool DecodeProposal(const std::string& text, Tuning* tuning, bool* final) {
  if (text.empty() || (text[0] != 'F' && text[0] != 'N')) return false;
  *final = text[0] == 'F';
  return tuning->Parse(text.substr(1));
}

}  // namespace hbcore
