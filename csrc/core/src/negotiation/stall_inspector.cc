#include "negotiation/stall_inspector.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace hbcore {
namespace {

std::string Ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

}  // namespace

StallInspector::StallInspector(const Config& config, std::string set_suffix)
    : check_seconds_(config.stall_check_seconds),
      shutdown_seconds_(config.stall_shutdown_seconds),
      last_check_(Clock::now()),
      set_suffix_(std::move(set_suffix)) {}

bool StallInspector::Due(const std::map<std::string, TensorEntry>& pending,
                         Clock::time_point now) const {
  if (pending.empty()) return false;
  if (check_seconds_ <= 0 && shutdown_seconds_ <= 0) return false;
  Clock::time_point oldest = now;
  for (const auto& kv : pending) {
    if (kv.second.request.op != OpType::kJoin) {
      oldest = std::min(oldest, kv.second.enqueued);
    }
  }
  const double age = std::chrono::duration<double>(now - oldest).count();
  const double since = std::chrono::duration<double>(now - last_check_).count();
  if (check_seconds_ > 0 && age >= check_seconds_ && since >= check_seconds_) {
    return true;
  }
  // With a shutdown time, check again at least every second once it passed.
  return shutdown_seconds_ > 0 && age >= shutdown_seconds_ &&
         since >= std::min(1.0, shutdown_seconds_);
}

std::string StallInspector::Judge(const std::vector<StallReport>& stalls) const {
  std::string shutdown;
  for (const StallReport& stall : stalls) {
    std::ostringstream msg;
    msg << "tensor '" << stall.name << "'" << set_suffix_ << " was submitted by rank(s) "
        << Ranks(stall.ready_ranks) << " " << static_cast<int>(stall.age_seconds)
        << " s ago but not yet by rank(s) " << Ranks(stall.missing_ranks)
        << ": those ranks may have diverged (different tensor names or "
           "control flow), or be slower";
    if (check_seconds_ > 0) HB_LOG(kWarning, "Stall: " << msg.str());
    if (shutdown_seconds_ > 0 && stall.age_seconds >= shutdown_seconds_ &&
        shutdown.empty()) {
      shutdown = "stalled " + msg.str() + " (HB_STALL_SHUTDOWN_TIME_SECONDS=" +
                 std::to_string(static_cast<int>(shutdown_seconds_)) + ")";
    }
  }
  return shutdown;
}

}  // namespace hbcore
