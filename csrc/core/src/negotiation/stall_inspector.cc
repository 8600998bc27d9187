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
      shutdown_setting_(config.stall_shutdown_setting),
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

std::string StallInspector::Describe(const StallReport& stall) const {
  std::ostringstream msg;
  msg << "tensor '" << stall.name << "'" << set_suffix_ << " was submitted by rank(s) "
      << Ranks(stall.ready_ranks) << " " << static_cast<int>(stall.age_seconds)
      << " s ago but not yet by rank(s) " << Ranks(stall.missing_ranks)
      << ": those ranks are busy elsewhere (a checkpoint or an evaluation on "
         "some ranks only), or have diverged (a collective inside a branch "
         "the ranks take differently, such as an if on the rank or a "
         "tf.cond, or different tensor names)";
  return msg.str();
}

std::vector<std::string> StallInspector::Warnings(
    const std::vector<StallReport>& stalls) const {
  std::vector<std::string> lines;
  if (check_seconds_ <= 0) return lines;
  // Only tensors that have waited the check time are stalled. A check is
  // due when this rank's oldest entry has; the others pending at that
  // moment may have been submitted a millisecond ago by a rank that is
  // merely a little ahead (Horovod warns per tensor the same way).
  for (const StallReport& stall : stalls) {
    if (stall.age_seconds >= check_seconds_) {
      lines.push_back("Stall: " + Describe(stall));
    }
  }
  if (lines.empty()) return lines;
  // Once per check: what the job does next, so that a hung job is never
  // silent about how to end it. Horovod's default (never) is kept because
  // legitimate waits have no bound hbcore could know (docs/configuration.md,
  // "HB_STALL_SHUTDOWN_TIME_SECONDS").
  std::ostringstream next;
  if (shutdown_seconds_ > 0) {
    next << "Stall: the job ends with a ShutdownError on every rank once a "
            "stall lasts "
         << shutdown_seconds_ << " s (" << shutdown_setting_ << ")";
  } else {
    next << "Stall: the job waits as long as a stall lasts, warning every "
         << check_seconds_
         << " s; HB_STALL_SHUTDOWN_TIME_SECONDS=S (hbrun "
            "--stall-check-shutdown-time-seconds S) ends it with a "
            "ShutdownError on every rank once a stall lasts S seconds";
  }
  lines.push_back(next.str());
  return lines;
}

std::string StallInspector::Judge(const std::vector<StallReport>& stalls) const {
  for (const std::string& line : Warnings(stalls)) HB_LOG(kWarning, line);
  for (const StallReport& stall : stalls) {
    if (shutdown_seconds_ > 0 && stall.age_seconds >= shutdown_seconds_) {
      std::ostringstream reason;
      reason << "stalled " << Describe(stall)
             << " (" << shutdown_setting_ << "=" << shutdown_seconds_ << ")";
      return reason.str();
    }
  }
  return std::string();
}

}  // namespace hbcore
