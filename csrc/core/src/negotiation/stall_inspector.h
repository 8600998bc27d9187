// The stall inspector: the one component that decides when a rank asks for
// a stall check and what a check's findings mean.
//
// Protocol (inside the negotiation cycle, see controller.h):
//  1. Every rank: Due() says whether its oldest pending entry (joins
//     excepted) has waited HB_STALL_CHECK_TIME_SECONDS since the last check
//     (or, with HB_STALL_SHUTDOWN_TIME_SECONDS, past that time, then at
//     least every second). The runtime starts a cycle for it; the rank sets
//     the stall flag of that cycle and calls Checked().
//  2. If any rank set the flag, every rank sends the names and ages of its
//     pending entries with its request list.
//  3. The coordinator finds the names some ranks lack (Coordinator::
//     FindStalls) and Judge() logs each one and returns the shutdown reason
//     once one has lasted HB_STALL_SHUTDOWN_TIME_SECONDS.
#ifndef HBCORE_NEGOTIATION_STALL_INSPECTOR_H_
#define HBCORE_NEGOTIATION_STALL_INSPECTOR_H_

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "negotiation/coordinator.h"
#include "negotiation/tensor_entry.h"

namespace hbcore {

class StallInspector {
 public:
  // `set_suffix` (ProcessSetInfo::Suffix) names the set in messages.
  explicit StallInspector(const Config& config, std::string set_suffix = "");

  // Step 1: whether this rank asks for a check now.
  bool Due(const std::map<std::string, TensorEntry>& pending,
           Clock::time_point now) const;
  // Step 1: a check was asked for at `now`.
  void Checked(Clock::time_point now) { last_check_ = now; }
  // Step 3 (coordinator): logs Warnings(stalls); returns why the job must
  // end, or "" while no stall has lasted the shutdown time.
  std::string Judge(const std::vector<StallReport>& stalls) const;
  // The warning lines of a check: one per tensor that has waited at least
  // HB_STALL_CHECK_TIME_SECONDS (younger ones are not stalled), then one saying
  // what the job does next (waits, or ends after the shutdown time, naming
  // the setting). None while warnings are off (HB_STALL_CHECK_TIME_SECONDS=0).
  std::vector<std::string> Warnings(const std::vector<StallReport>& stalls) const;

 private:
  // One stalled tensor: who submitted it, how long ago, who did not, why.
  std::string Describe(const StallReport& stall) const;

  double check_seconds_;
  double shutdown_seconds_;
  std::string shutdown_setting_;  // its variable, for messages
  Clock::time_point last_check_;
  std::string set_suffix_;
};

}  // namespace hbcore

#endif  // HBCORE_NEGOTIATION_STALL_INSPECTOR_H_
