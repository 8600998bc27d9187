#include "common/wait_policy.h"

namespace hbcore {

WaitPolicy ControlWaitPolicy(bool spare_cpus, double max_sleep_us) {
  WaitPolicy policy;
  policy.spin_us = spare_cpus ? 30.0 : 1000.0;
  policy.yield = !spare_cpus;
  policy.max_sleep_us = max_sleep_us;
  return policy;
}

}  // namespace hbcore
