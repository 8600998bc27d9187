#include "transport/thread_affinity.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

namespace hbcore {
namespace {

Status ConfigError(const std::string& message) {
  return Status(HB_ERR_CONFIG, "HB_THREAD_AFFINITY: " + message);
}

// Comma-separated non-negative integers; false on anything else.
bool ParseCpus(const std::string& list, std::vector<int>* cpus) {
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t first = item.find_first_not_of(" \t");
    const size_t last = item.find_last_not_of(" \t");
    if (first == std::string::npos) return false;
    item = item.substr(first, last - first + 1);
    if (item.size() > 6 ||
        item.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    cpus->push_back(std::stoi(item));
  }
  return !cpus->empty() && list.back() != ',';
}

}  // namespace

Status BackgroundThreadCpu(const std::string& list, int local_rank,
                           int local_size, const std::vector<int>& allowed,
                           int* cpu) {
  *cpu = -1;
  if (list.empty()) return Status::OK();
  std::vector<int> cpus;
  if (!ParseCpus(list, &cpus)) {
    return ConfigError("'" + list + "' is not a comma-separated list of "
                       "CPU ids (one per local rank, e.g. 0,1)");
  }
  if (static_cast<int>(cpus.size()) < local_size) {
    return ConfigError("'" + list + "' names " + std::to_string(cpus.size()) +
                       " CPU(s), but this host runs " +
                       std::to_string(local_size) +
                       " ranks: give one CPU id per local rank");
  }
  const int wanted = cpus[local_rank];
  if (allowed.empty()) {
    return ConfigError("this process's CPU set could not be read");
  }
  if (!std::binary_search(allowed.begin(), allowed.end(), wanted)) {
    return ConfigError("local rank " + std::to_string(local_rank) +
                       " may not run on CPU " + std::to_string(wanted) +
                       " (not in this process's CPU set)");
  }
  *cpu = wanted;
  return Status::OK();
}

Status PinThread(std::thread& thread, int cpu) {
  if (cpu < 0) return Status::OK();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = pthread_setaffinity_np(thread.native_handle(), sizeof(set),
                                        &set);
  if (rc != 0) {
    return ConfigError("pinning the background thread to CPU " +
                       std::to_string(cpu) + ": " + std::strerror(rc));
  }
  return Status::OK();
}

std::vector<int> ThreadCpus(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int CpuCount(const std::vector<int>& allowed) {
  return allowed.empty() ? static_cast<int>(std::thread::hardware_concurrency())
                         : static_cast<int>(allowed.size());
}

}  // namespace hbcore
